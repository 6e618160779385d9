"""Stage "artifacts": every candidate of the run written and linted: fp16, one INT8 candidate
per calibrator (and one FP8 candidate per FP8 calibrator where ``precision.formats`` has fp8),
each built by :func:`quantkit.run.artifact.build_artifact` from its Plan."""

from __future__ import annotations

import logging

from quantkit.run.artifact import (
    Artifact,
    ParkedRefined,
    build_artifact,
    fp8_model_graph,
    fp8_plan,
    plan_for_ranges,
)
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.fp8_weights import FP8_CHOOSER, fp8_weights
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.quant_source import QuantSource
from quantkit.run.stages.calibration import Calibration

__all__ = ["artifacts"]

log = logging.getLogger(__name__)


def artifacts(ctx: RunContext, calibration: Calibration, overflow: Fp16Range,
              source: QuantSource, reference: Evaluation) -> dict[str, Artifact]:
    """The FP16 candidate (on the original graph: no INT8 node, nothing for ptq to do) and
    one INT8 candidate per calibrator, each planned on ``source.graph``, refined by
    ``source.refine`` (range search, weight rounding, bias correction), with every node it
    leaves out of INT8 computing the original FP32 function (``source.restored_for``), and
    written with the recipe's ``int8_weights``. ``overflow``: the original graph's FP16
    range check. FP8 candidates (``precision.formats``): on the original graph at opset 19,
    their weights rounded as ``precision.fp8_weight_rounding`` says (``run/fp8_weights.py``;
    ``reference``: the FP32 dev evaluation its ``auto`` scores compare against)."""
    out = {"fp16": build_artifact(ctx, "fp16", plan_for_ranges(ctx, None, overflow))}
    for method, rng in calibration.ranges.items():
        name = f"int8.{method}"
        plan = plan_for_ranges(ctx, rng, source.fp16, source.graph)
        # every rewrite group without an INT8 node back to the original FP32 function (a
        # SmoothQuant Mul before an FP16 head, an equalized pair left in FP16)
        refined = source.refine(ctx, plan, calibration.ranges)
        refined = source.restored_for(refined, refined.plan, out["fp16"].plan)
        for r in refined.records:
            log.info("ptq %s (%s)", r.summary(), method)
        out[name] = build_artifact(
            ctx, name, refined.plan, graph=source.graph,
            model=None if refined.model is source.graph.model else refined.model,
            nonfinite=rng.excluded, int8_weights=source.recipe.int8_weights,
            steps=source.steps + refined.records,
            refined=ParkedRefined.park(refined, keep=source.graph.model, name=name))
    if not calibration.fp8_ranges:
        return out
    s = ctx.settings
    fp8_graph = fp8_model_graph(ctx.graph)
    plans = {name: fp8_plan(plan_for_ranges(ctx, rng, overflow, fp8_graph), name,
                            fp8_graph.model, s.precision.remainder)
             for name, rng in calibration.fp8_ranges.items()}
    weights = fp8_weights(ctx, fp8_graph, plans.get(FP8_CHOOSER, next(iter(plans.values()))),
                          reference)
    for name, plan in plans.items():
        out[name] = build_artifact(ctx, name, plan, graph=fp8_graph,
                                   model=weights.model_for(fp8_graph.model, plan),
                                   nonfinite=calibration.fp8_ranges[name].excluded,
                                   int8_weights=True, steps=weights.steps())
    return out
