"""A recipe: which post-training steps run, with which parameters (one schema for all).

:class:`Recipe` is the schema of the techniques' settings: ``settings.ptq`` extends it (so a
config key and a recipe field are one declaration), :func:`named_recipes` gives the declared
recipes a user can pin (``ptq.recipe=bert``) and that ``ptq.recipe=auto`` chooses among on
dev (quantkit/run/recipe_choice.py), and the pipeline (quantkit/ptq/pipeline.py) reads one.

    recipe = Recipe.from_config(settings.ptq)           # ptq.recipe=custom: the keys as set
    recipe = named_recipes()["bert"]                     # a named recipe
    recipe.with_(bias_correction=True)                   # a variant (recipes are values)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

__all__ = ["Recipe", "named_recipes", "RECIPE_NAMES", "ROUNDING_METHODS"]

#: weight rounding methods (ptq/weight_rounding.py, ptq/sequential.py)
ROUNDING_METHODS = ("nearest", "gptq", "gptq_aware", "gptq_sequential")


@dataclass
class Recipe:
    """The post-training steps of one INT8 candidate, in run order (all off by default):

    before calibration (the FP32 function is unchanged, proven per model):
      ``equalization`` off | per_channel_clip | skip (ReLU6 handling of Conv pairs),
      ``equalization_iterations``, ``equalization_alpha`` (None: weight-only CLE scales; a
      number: activation-aware scales); ``stream_alpha`` (None: off; a number: residual
      streams scaled per channel through their Adds, quantkit/ptq/stream_scaling.py);
      ``smoothquant_alpha`` (None: off) and
      ``smoothquant_min_outlier_ratio``;
    per INT8 plan: ``range_search`` (per-tensor amax search over every calibrator's
      candidates, ``range_search_grid``, ``range_search_combine`` widest | sum,
      ``range_search_error`` tensor | row); ``weight_rounding`` nearest | gptq | gptq_aware |
      gptq_sequential; ``bias_correction``; ``int8_weights`` (INT8 weights as int8
      initializers: one DQ instead of FP32 + Q/DQ).

    A plain dataclass (Hydra's schema base for ``settings.ptq``); treat it as a value and
    derive variants with :meth:`with_`."""

    shift: bool = False
    smoothquant_alpha: Optional[float] = None
    smoothquant_min_outlier_ratio: float = 0.0
    equalization: str = "off"
    equalization_iterations: int = 2
    equalization_alpha: Optional[float] = None
    stream_alpha: Optional[float] = None
    range_search: bool = False
    range_search_grid: int = 16
    range_search_combine: str = "widest"
    range_search_error: str = "tensor"
    bias_correction: bool = False
    weight_rounding: str = "nearest"
    int8_weights: bool = True

    @classmethod
    def from_config(cls, cfg: Any) -> "Recipe":
        """The recipe fields of ``cfg`` (``settings.ptq`` or anything with those attributes)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})

    def with_(self, **changes: Any) -> "Recipe":
        return dataclasses.replace(Recipe.from_config(self), **changes)

    def key(self) -> dict[str, Any]:
        """The fields as a plain dict (a stage-cache key part; equal recipes, equal keys)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Recipe)}

    @property
    def rewrites_graph(self) -> bool:
        """True when a step runs before calibration (the calibrated graph differs)."""
        return (self.equalization != "off" or self.shift
                or self.smoothquant_alpha is not None or self.stream_alpha is not None)

    def describe(self) -> str:
        """A short name of what is on, e.g. ``sq0.8+search(row)+bias``."""
        parts = []
        if self.equalization != "off":
            parts.append("eq" + ("" if self.equalization_alpha is None
                                 else f"{self.equalization_alpha:g}"))
        if self.stream_alpha is not None:
            parts.append(f"stream{self.stream_alpha:g}")
        if self.shift:
            parts.append("shift")
        if self.smoothquant_alpha is not None:
            parts.append(f"sq{self.smoothquant_alpha:g}")
        if self.range_search:
            parts.append(f"search({self.range_search_error})")
        if self.weight_rounding != "nearest":
            parts.append(self.weight_rounding)
        if self.bias_correction:
            parts.append("bias")
        return "+".join(parts) or "nearest"


#: the declared recipes (besides ``auto`` and ``custom``), in the order auto tries them
RECIPE_NAMES = ("none", "generic", "bert", "mobilenet")


def named_recipes() -> dict[str, Recipe]:
    """The declared recipes a user can pin with ``ptq.recipe=<name>`` (fresh values):

    - ``none``: no step (nearest rounding, calibrator ranges as computed);
    - ``generic``: the old generic default, per-tensor range search and int8 weights;
    - ``bert``: SmoothQuant 0.8 + row-wise range search + bias correction (the hand recipe
      bert_int8 carried: agreement 0.9828 on its test split);
    - ``mobilenet``: activation-aware equalization 0.5 + range search + sequential GPTQ
      rounding (mobilenet_int8's hand recipe).
    """
    generic = Recipe(range_search=True)
    return {
        "none": Recipe(),
        "generic": generic,
        "bert": generic.with_(smoothquant_alpha=0.8, range_search_error="row",
                              bias_correction=True),
        "mobilenet": generic.with_(equalization="per_channel_clip", equalization_alpha=0.5,
                                   weight_rounding="gptq_sequential"),
    }
