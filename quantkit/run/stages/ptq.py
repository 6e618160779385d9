"""Stage "ptq": the recipe for this model, the graph that gets quantized, proven.

    source = ptq(ctx, scope, fp16, reference)  # after the scope and the FP16 range check
    calibration(ctx, source); artifacts(ctx, cal, fp16, source, reference); search(..., source)

The stage picks the recipe (``ptq.recipe``: auto -> chosen on dev among the declared recipes,
quantkit/run/recipe_choice.py; a named recipe; custom -> the step keys), applies its rewrites
(equalization, SmoothQuant) to a copy of the FP32 graph, each proven to keep the FP32
function on the calibration data or dropped with its reason, and returns one frozen
:class:`QuantSource`: the graph to calibrate and quantize, its scope and FP16 range check,
the steps and proofs, and :meth:`QuantSource.refine` (range search, weight rounding, bias
correction of one INT8 plan; stage-cached) that every later stage calls. The FP32 reference
stays the original model (``ctx.graph``): every comparison is against its outputs.
Per-layer comparison tensors whose FP32 values a rewrite changed are dropped from the
scope's ``compare_tensors`` and listed in the record.
"""

from __future__ import annotations

import dataclasses
import logging

from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.quant_source import QuantSource, rewrite_for, source_for
from quantkit.run.recipe_choice import choose_recipe
from quantkit.run.scope import QuantScope
from quantkit.settings.ptq_recipe import Recipe, named_recipes

__all__ = ["ptq", "pinned_recipe"]

log = logging.getLogger(__name__)


def pinned_recipe(ctx: RunContext) -> tuple[str, Recipe]:
    """``ptq.recipe`` when it is not auto: a named recipe or the custom step keys."""
    name = ctx.settings.ptq.recipe
    if name == "custom":
        return name, Recipe.from_config(ctx.settings.ptq)
    return name, named_recipes()[name]


def ptq(ctx: RunContext, scope: QuantScope, fp16: Fp16Range, reference: Evaluation
        ) -> QuantSource:
    """The recipe (pinned, or chosen on dev for ``ptq.recipe=auto``), its proven rewrites,
    and the QuantSource every later stage quantizes from. ``scope`` / ``fp16``: the scope
    and FP16 range check of the original graph; ``reference``: FP32 on dev (auto scores
    recipes against it)."""
    choice = None
    if ctx.settings.ptq.recipe == "auto":
        choice = choose_recipe(ctx, scope, fp16, reference)
        name, recipe, rewritten = choice.name, choice.recipe, choice.rewritten
    else:
        name, recipe = pinned_recipe(ctx)
        rewritten = rewrite_for(ctx, recipe)
    source = source_for(ctx, scope, fp16, name, recipe, rewritten)
    for r in source.steps:
        log.info("ptq %s", r.summary())
    for p in source.proofs:
        (log.info if p.kept else log.warning)("ptq %s: %s", p.step, p.reason)
    return dataclasses.replace(source, choice=choice)
