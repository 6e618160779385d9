"""Stage "ptq": one source per quantized format the run writes: the INT8 recipe for this model
with its proven rewrites, and the FP8 source where ``precision.formats`` has fp8.

    sources = ptq(ctx, scope, fp16, reference)  # after the scope and the FP16 range check
    calibration(ctx, sources); artifacts(ctx, cal, fp16, sources); search(..., sources.int8)

The stage picks the INT8 recipe (``ptq.recipe``: auto -> chosen on dev among the declared
recipes, quantkit/run/recipe_choice.py; a named recipe; custom -> the step keys), applies its
rewrites (equalization, SmoothQuant) to a copy of the FP32 graph, each proven to keep the
FP32 function on the calibration data or dropped with its reason, and returns the frozen
:class:`Sources`: every source has the interface of
:class:`~quantkit.run.quant_source.QuantSource` (what to calibrate, the plan of one
calibrator's ranges, the per-plan steps), so every later stage builds every format's
candidates one way. The FP32 reference stays the original model (``ctx.graph``): every
comparison is against its outputs. Per-layer comparison tensors whose FP32 values a rewrite
changed are dropped from the INT8 scope's ``compare_tensors`` and listed in the record.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from quantkit.record.ptq import PtqRecord
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.fp8_source import Fp8Source
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.int8_source import Int8Source, rewrite_for, source_for
from quantkit.run.quant_source import QuantSource
from quantkit.run.recipe_choice import choose_recipe
from quantkit.run.scope import QuantScope
from quantkit.settings.ptq_recipe import Recipe, named_recipes

__all__ = ["Sources", "pinned_recipe", "ptq"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sources:
    """The ptq stage's value. ``int8``: the recipe's INT8 source (its record is
    ``record.ptq``; the per-layer comparison and the mixed search build on it); ``fp8``:
    the FP8 source where ``precision.formats`` has fp8; ``formats``: the formats whose
    candidates the run writes, in order."""

    int8: Int8Source
    formats: tuple[str, ...]
    fp8: Fp8Source | None = None

    def writing(self) -> tuple[QuantSource, ...]:
        """The sources whose candidates the run writes: INT8, then FP8."""
        return tuple(s for s in (self.int8, self.fp8)
                     if s is not None and s.format in self.formats)

    def to_record(self) -> PtqRecord:
        return self.int8.to_record()


def pinned_recipe(ctx: RunContext) -> tuple[str, Recipe]:
    """``ptq.recipe`` when it is not auto: a named recipe or the custom step keys."""
    name = ctx.settings.ptq.recipe
    if name == "custom":
        return name, Recipe.from_config(ctx.settings.ptq)
    return name, named_recipes()[name]


def ptq(ctx: RunContext, scope: QuantScope, fp16: Fp16Range, reference: Evaluation
        ) -> Sources:
    """The INT8 recipe (pinned, or chosen on dev for ``ptq.recipe=auto``) with its proven
    rewrites, and the FP8 source where the run writes FP8. ``scope`` / ``fp16``: the scope
    and FP16 range check of the original graph; ``reference``: FP32 on dev (auto scores
    recipes, and the FP8 weight rounding's ``auto`` its choice, against it)."""
    choice = None
    if ctx.settings.ptq.recipe == "auto":
        choice = choose_recipe(ctx, scope, fp16, reference)
        name, recipe, rewritten = choice.name, choice.recipe, choice.rewritten
    else:
        name, recipe = pinned_recipe(ctx)
        rewritten = rewrite_for(ctx, recipe)
    int8 = source_for(ctx, scope, fp16, name, recipe, rewritten)
    for r in int8.steps:
        log.info("ptq %s", r.summary())
    for p in int8.proofs:
        (log.info if p.kept else log.warning)("ptq %s: %s", p.step, p.reason)
    formats = tuple(ctx.settings.precision.formats)
    fp8 = Fp8Source.of(ctx, scope, fp16, reference) if "fp8" in formats else None
    return Sources(int8=dataclasses.replace(int8, choice=choice), formats=formats, fp8=fp8)
