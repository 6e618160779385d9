"""ptq.* schema: the post-training recipe, its step keys and the auto choice; ptq checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from quantkit.errors import ConfigError
from quantkit.settings.ptq_recipe import RECIPE_NAMES, ROUNDING_METHODS, Recipe
from quantkit.settings.calibrator_schema import CALIBRATOR_NAMES
from quantkit.settings.value_checks import _choice, _positive


@dataclass
class PtqAutoConfig:
    """``ptq.recipe=auto``: the recipes tried on dev (quantkit/run/recipe_choice.py).

    ``budget``: at most this many recipe evaluations (each one dev-subset evaluation of full
    INT8); ``subset``: dev examples a recipe is scored on (mean KL vs FP32 for logits,
    1 - mean cosine for embeddings); ``calibrator``: the calibrator whose plan scores a
    recipe."""

    budget: int = 12
    subset: int = 512
    calibrator: str = "percentile"


@dataclass
class PtqConfig(Recipe):
    """Post-training steps on the graph that gets quantized (quantkit/ptq; the stage
    quantkit/run/stages/ptq.py). ``recipe``: ``auto`` (default: chosen per model on dev among the
    declared recipes), a named recipe (``none``, ``generic``, ``bert``, ``mobilenet``:
    quantkit/settings/ptq_recipe.py), or ``custom``: exactly the step keys below (the fields of
    :class:`~quantkit.settings.ptq_recipe.Recipe`, all off by default). The FP32 reference stays the
    original model; every rewrite is proven to keep its FP32 function on the run's own
    calibration data, or dropped with its reason."""

    recipe: str = "auto"
    range_search_samples: int = 32  # calibration examples the range search captures (memory)
    auto: PtqAutoConfig = field(default_factory=PtqAutoConfig)


def validate_ptq(q: PtqConfig) -> None:
    """Ranges of the ptq keys (ConfigError naming the key); step keys set beside a recipe
    that is not ``custom`` are refused (they would be ignored)."""
    _choice("ptq.recipe", q.recipe, ("auto", *RECIPE_NAMES, "custom"))
    if q.recipe != "custom":
        default = Recipe()
        changed = [k for k, v in Recipe.from_config(q).key().items()
                   if v != getattr(default, k)]
        if changed:
            raise ConfigError(f"config key ptq.{changed[0]} is set, but ptq.recipe={q.recipe} "
                              "chooses the steps", value=getattr(q, changed[0]),
                              fix="add ptq.recipe=custom to run exactly the steps you set, or "
                                  f"drop ptq.{changed[0]}")
    for key, value in (("ptq.smoothquant_alpha", q.smoothquant_alpha),
                       ("ptq.equalization_alpha", q.equalization_alpha),
                       ("ptq.stream_alpha", q.stream_alpha)):
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"config key {key} must be in (0, 1) or null (off)", value=value,
                              fix=f"e.g. {key}=0.8, or {key}=null")
    _choice("ptq.equalization", q.equalization, ("off", "per_channel_clip", "skip"))
    _choice("ptq.range_search_combine", q.range_search_combine, ("widest", "sum"))
    _choice("ptq.range_search_error", q.range_search_error, ("tensor", "row"))
    _choice("ptq.weight_rounding", q.weight_rounding, ROUNDING_METHODS)
    _choice("ptq.auto.calibrator", q.auto.calibrator, CALIBRATOR_NAMES)
    _positive("ptq.smoothquant_min_outlier_ratio", q.smoothquant_min_outlier_ratio,
              allow_zero=True)
    for key, value in (("ptq.equalization_iterations", q.equalization_iterations),
                       ("ptq.range_search_grid", q.range_search_grid),
                       ("ptq.range_search_samples", q.range_search_samples),
                       ("ptq.auto.budget", q.auto.budget), ("ptq.auto.subset", q.auto.subset)):
        _positive(key, value)
