"""The INT8 source (:class:`Int8Source`) and what builds it: the recipe's rewrites of the FP32
graph, each proven (:func:`rewrite_for`), and the graph they made with its own scope and FP16
range check (:func:`source_for`). The ptq stage (quantkit/run/stages/ptq.py) picks the recipe
and calls them; the recipe choice (quantkit/run/recipe_choice.py) builds its trial sources
with the same functions."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.plan import Plan
from quantkit.ptq.capture import capture_tensors
from quantkit.ptq.pipeline import (
    Refined,
    Rewritten,
    refine,
    restored_for,
    rewrite,
)
from quantkit.ptq.proof import StepProof
from quantkit.ptq.step_record import StepRecord
from quantkit.record.ptq import PtqRecord
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range, check_fp16_range
from quantkit.run.quant_source import ParkedRefined, QuantSource, calib_data, ptq_memo, ptq_runners
from quantkit.run.recipe_trial import RecipeChoice
from quantkit.run.scope import QuantScope, quant_scope
from quantkit.settings.ptq_recipe import Recipe

__all__ = ["Int8Source", "rewrite_for", "source_for"]

log = logging.getLogger(__name__)

#: relative tolerance under which a comparison tensor counts as unchanged by the rewrite
_SAME_RTOL = 1e-3


@dataclass(frozen=True)
class Int8Source(QuantSource):
    """The INT8 source: the recipe's graph and per-plan steps (DESIGN.md).

    ``recipe`` (named ``recipe_name``) is what runs; ``graph``: the ModelGraph that gets
    calibrated and quantized (``original`` itself when no rewrite was kept); ``scope``: the
    quantization scope on ``graph``; ``fp16``: the FP16 range check of ``graph``;
    ``rewritten``: the rewrites kept, with the proof of every rewrite tried;
    ``dropped_compare``: per-layer comparison tensor -> why it was dropped; ``choice``: how
    ``ptq.recipe=auto`` chose (None for a pinned recipe)."""

    recipe: Recipe
    recipe_name: str
    graph: ModelGraph
    original: ModelGraph
    scope: QuantScope
    fp16: Fp16Range
    rewritten: Rewritten
    dropped_compare: Mapping[str, str] = field(default_factory=dict)
    choice: RecipeChoice | None = None
    #: the range search's measured layer errors, shared by the plans refined on ``graph``
    #: (the four calibrators' plans score the same candidates: quantkit/ptq/pipeline.refine)
    search_errors: dict = field(default_factory=dict, compare=False, repr=False)

    format: ClassVar[str] = "int8"

    @property
    def int8_weights(self) -> bool:
        return self.recipe.int8_weights

    def ranges_name(self, calibrator: str) -> str:
        """INT8 ranges keep the calibrator's bare name (``ranges/minmax.json`` and TensorRT's
        calibration cache name them so since before other formats existed)."""
        return calibrator

    def park(self, refined: Refined, name: str) -> ParkedRefined:
        """``refined`` parked on disk (unless it is this source's own graph): the search's
        mixed plans are restored from it (:meth:`variant_refined`)."""
        return ParkedRefined.park(refined, keep=self.graph.model, name=name)

    @property
    def is_rewritten(self) -> bool:
        return self.graph is not self.original

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        return self.rewritten.steps

    @property
    def proofs(self) -> tuple[StepProof, ...]:
        return self.rewritten.proofs

    def refine(self, ctx: RunContext, plan: Plan, ranges: Mapping[str, Any], *,
               recipe: Recipe | None = None) -> Refined:
        """Range search, weight rounding, bias correction of ``plan`` (built on ``graph``)
        as the recipe (or ``recipe``) says; every statistics pass stage-cached under what
        produced it."""
        return refine(self.graph.model, plan, ranges, recipe or self.recipe, calib_data(ctx),
                      target=ctx.settings.target, infos=self.graph.infos,
                      runners=ptq_runners(ctx, self.graph), memo=ptq_memo(ctx),
                      graph_sha=self.graph.sha256, progress=ctx.settings.progress,
                      search_errors=self.search_errors)

    @property
    def variant_recipe(self) -> Recipe:
        """The recipe whose edits the search's mixed plans keep on their INT8 nodes: the
        recipe itself, except that ``gptq_sequential`` becomes ``gptq_aware`` (no range
        search: the base plan's searched ranges stay). Sequential rounding fits each node
        with every node before it INT8 and moves the mean output they cost into its bias;
        in a plan that keeps some of them out of INT8 that bias is stale (MobileNetV2,
        eq0.5 + stream0.5, dev: one projection Conv left INT8 with its sequential edits
        -0.42 pp, rounded for that plan alone -0.10 pp). The one-pass ``gptq_aware`` fits
        each node to its own input quantization only, so its edits hold in every plan."""
        if self.recipe.weight_rounding != "gptq_sequential":
            return self.recipe
        return self.recipe.with_(weight_rounding="gptq_aware", range_search=False)

    def variant_refined(self, ctx: RunContext, parked: ParkedRefined | None
                        ) -> Refined | None:
        """The refinement the mixed plans of a full INT8 candidate are restored from, given
        its parked refinement (``Artifact.refined``): its own, or its plan refined again with
        :attr:`variant_recipe` (stage-cached); None for a candidate on the original graph
        without ptq edits (``parked`` None)."""
        if parked is None:
            return None
        refined = parked.load()
        recipe = self.variant_recipe
        if recipe is self.recipe:
            return refined
        return self.refine(ctx, refined.plan, {}, recipe=recipe)

    def restored_for(self, refined: Refined, plan: Plan, fallback: Plan) -> Refined:
        """``refined`` for ``plan`` (a subset of its INT8 nodes: the search's mixed plans):
        every node ``plan`` leaves out of INT8 computes the original FP32 function
        (quantkit.ptq.pipeline.restored_for); ``fallback``: the original graph's plan."""
        return restored_for(refined, plan, calibrated=self.graph.model,
                            rewritten=self.rewritten, original=self.original.model,
                            fallback=fallback)

    def to_record(self) -> PtqRecord:
        return PtqRecord(recipe=self.recipe_name, steps_on=self.recipe.describe(),
                         settings=self.recipe.key(), graph_rewritten=self.is_rewritten,
                         graph_sha256=self.graph.sha256, steps=list(self.steps),
                         proofs=list(self.proofs),
                         dropped_compare_tensors=dict(self.dropped_compare),
                         choice=self.choice.to_record() if self.choice is not None else None)










def rewrite_for(ctx: RunContext, recipe: Recipe) -> Rewritten:
    """``recipe``'s rewrites of the FP32 graph, each proven on the calibration data."""
    return rewrite(ctx.graph.model, recipe, calib_data(ctx), output=ctx.model.output_name,
                   logits=ctx.model.output_kind == "logits", runners=ptq_runners(ctx),
                   memo=ptq_memo(ctx))


def source_for(ctx: RunContext, scope: QuantScope, fp16: Fp16Range, name: str,
               recipe: Recipe, rewritten: Rewritten) -> Int8Source:
    """The Int8Source of ``recipe`` whose rewrites are ``rewritten``: the graph they made
    (with its own scope and FP16 range check), or the original graph when none applied."""
    if rewritten.model is ctx.graph.model:
        return Int8Source(recipe=recipe, recipe_name=name, graph=ctx.graph,
                           original=ctx.graph, scope=scope, fp16=fp16, rewritten=rewritten)
    graph = ModelGraph.build(rewritten.model)
    new = quant_scope(ctx, graph)
    dropped = _changed_tensors(ctx, graph, scope.compare_tensors)
    if dropped:
        log.info("ptq: %d per-layer comparison tensors dropped (rewritten values): %s",
                 len(dropped), ", ".join(list(dropped)[:8]))
    own_fp16 = (check_fp16_range(ctx, graph) if ctx.settings.precision.remainder == "fp16"
                else fp16)
    compare = tuple(t for t in scope.compare_tensors if t not in dropped)
    return Int8Source(recipe=recipe, recipe_name=name, graph=graph, original=ctx.graph,
                       scope=dataclasses.replace(new, compare_tensors=compare), fp16=own_fp16,
                       rewritten=rewritten, dropped_compare=dropped)


def _changed_tensors(ctx: RunContext, graph: ModelGraph, tensors) -> dict[str, str]:
    """Comparison tensors of the original graph missing from ``graph`` or with other FP32
    values there (first calibration batch)."""
    names = set(graph.infos) | {i.name for i in graph.model.graph.input}
    out = {t: "not in the ptq-rewritten graph" for t in tensors if t not in names}
    keep = [t for t in tensors if t not in out]
    first = next(iter(ctx.batches(ctx.head(ctx.splits.calib, 8),
                                  ctx.settings.calibrator.batch_size)), None)
    if first is None or not keep:
        return out
    ref = capture_tensors(ctx.graph.model, [first], keep)
    new = capture_tensors(graph.model, [first], keep)
    for t in keep:
        a, b = ref[t][0], new[t][0]
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        if a.shape != b.shape or float(np.max(np.abs(a - b), initial=0.0)) > \
                _SAME_RTOL * scale + 1e-6:
            out[t] = "FP32 values rescaled by the ptq rewrite (same name, other values)"
    return out
