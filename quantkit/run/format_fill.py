"""The mixed search's format fill (issue 25): of the layers the search keeps out of INT8, those
the target runs faster in FP8 E4M3 than in FP16 (the cost model, ``precision/plan_cost.py``) go
to FP8, when the whole mixed plan then keeps the dev evidence the planned power on test needs.

The FP8 layers' ranges are measured on the graph the mixed plan is built from (the best INT8
candidate's refined graph with every non-INT8 node computing the original FP32 function, at
opset 19), with the FP8 calibrator of the best FP8 candidate on dev; an INT8 node and an FP8
node reading one tensor keep their own amax (``Plan.fp8_amax``). One dev evaluation decides:
the filled plan replaces the FP16 one only when it is powered; otherwise the search's result
stands and the record says why.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from quantkit.graph.facts import opset_version, quant_slots
from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.cost import estimate_layer
from quantkit.precision.fp8_rules import fp8_exclusions
from quantkit.precision.plan import NodeDecision, Plan, Precision
from quantkit.qdq.casts import to_opset
from quantkit.qdq.fp8 import FP8_OPSET
from quantkit.record.search import FormatFill, FormatFillSkipped, LayerEstimate
from quantkit.run.artifact import Artifact, build_artifact
from quantkit.run.context import RunContext
from quantkit.run.cost import run_gemm_shapes
from quantkit.run.evaluation import Evaluation, evaluate_artifact
from quantkit.run.int8_source import Int8Source
from quantkit.run.ranges import calibrators_for, source_ranges
from quantkit.run.verdicts import decision_value

__all__ = ["FillResult", "fp8_fill"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FillResult:
    """``artifact`` / ``evaluation``: the filled mixed candidate, None when the fill did not
    run or was not powered; ``fp8_layers``: the layers moved to FP8; ``record``: what
    ``record.search.format_fill`` shows (what was tried, the estimate, the verdict)."""

    artifact: Artifact | None
    evaluation: Evaluation | None
    fp8_layers: tuple[str, ...]
    record: FormatFill | FormatFillSkipped | None


def _cheaper_in_fp8(ctx: RunContext, layers: list[str]) -> tuple[list[str], dict]:
    """The layers the cost model finds faster in FP8 than in FP16 on ``gpu.sm``, and the
    per-layer estimates (ms) it compared."""
    s = ctx.settings
    shapes, _ = run_gemm_shapes(ctx)
    out_of_fp8 = fp8_exclusions(ctx.graph.model, layers)  # no FP8 kernel: never offered
    est, cheaper = {}, []
    for n in layers:
        if n not in shapes or n in out_of_fp8:
            continue
        op, mkn = shapes[n]
        flops = 2.0 * mkn[0] * mkn[1] * mkn[2]
        t16 = estimate_layer(flops, "fp16", s.gpu.sm, op=op, mkn=mkn)
        t8 = estimate_layer(flops, "fp8", s.gpu.sm, op=op, mkn=mkn)
        est[n] = {"fp16_ms": t16.time_ms, "fp8_ms": t8.time_ms, "basis": t8.basis,
                  "label": t8.label}
        if t8.time_ms < t16.time_ms:
            cheaper.append(n)
    return cheaper, est


def _estimates(est: dict) -> dict[str, LayerEstimate]:
    """The cost model's per-layer estimates as the record keeps them."""
    return {n: LayerEstimate(**e) for n, e in est.items()}


def _at_fp8_opset(model, plan: Plan, remainder: str) -> tuple["ModelGraph", Plan]:
    """``model`` at opset 19 as a ModelGraph, and ``plan`` with a decision (the remainder)
    for every node the conversion added."""
    if opset_version(model) < FP8_OPSET:
        model = to_opset(model, FP8_OPSET, why="FP8 Q/DQ")
    graph = ModelGraph.build(model)
    added = {n: NodeDecision(remainder, f"added by the opset-{FP8_OPSET} conversion")
             for n in graph.node_names if n not in plan.decisions}
    decisions = {n: plan.decisions.get(n) or added[n] for n in graph.node_names}
    return graph, dataclasses.replace(plan, decisions=decisions)


def fp8_fill(ctx: RunContext, base: Artifact, plan: Plan, kept: list[str],
             artifacts: dict[str, Artifact], evaluations: dict[str, Evaluation],
             reference: Evaluation, source: Int8Source, fallback: Plan, powered) -> FillResult:
    """Move the ``kept`` layers of the search's ``plan`` (built on ``base``) that FP8 runs
    faster than FP16 to FP8; ``powered(ev)`` is the search's dev criterion (the planned
    power on test at the margin)."""
    s = ctx.settings
    fp8 = [n for n in artifacts if n.startswith("fp8.")]
    if not fp8:  # an INT8-only run: nothing to fill, nothing recorded
        return FillResult(None, None, (), None)
    if not kept:
        return FillResult(None, None, (), FormatFillSkipped(ran=False,
                                                            why="no layer kept out of INT8"))
    cheaper, est = _cheaper_in_fp8(ctx, kept)
    if not cheaper:
        label = next(iter(est.values()))["label"] if est else f"gpu.sm={s.gpu.sm}"
        return FillResult(None, None, (), FormatFillSkipped(
            ran=False, estimates=_estimates(est),
            why=f"FP8 is not estimated faster than FP16 for any kept layer ({label})"))
    best8 = max(fp8, key=lambda n: decision_value(ctx, evaluations[n]))
    method = best8.split(".", 1)[1]
    variant = source.restored_for(base.refined.load(), plan, fallback) \
        if base.refined is not None else None
    model = variant.model if variant is not None else source.graph.model
    vplan = variant.plan if variant is not None else plan
    graph, vplan = _at_fp8_opset(model, vplan, s.precision.remainder)
    protos = {n.name: n for n in graph.model.graph.node}
    tensors = sorted({protos[n].input[i] for n in cheaper
                      for i in quant_slots(protos[n], graph.infos, graph.constants).activations})
    cal = calibrators_for(s.calibrator, grid="fp8", methods=[method])[method]
    ranges = source_ranges(ctx, graph, tensors, {best8: cal})[best8]
    missing = [t for t in tensors if t not in ranges.amax]
    if missing:
        return FillResult(None, None, (), FormatFillSkipped(
            ran=False, estimates=_estimates(est),
            why=f"no FP8 range for {missing[0]} "
                f"({ranges.excluded.get(missing[0], 'excluded')})"))
    filled = vplan.with_precision(cheaper, Precision.FP8,
                                  f"kept out of INT8 by search; FP8 ({best8}'s calibrator) is "
                                  "estimated faster than FP16 here")
    filled = dataclasses.replace(filled, fp8_amax={t: ranges.amax[t] for t in tensors})
    with tempfile.TemporaryDirectory(dir=ctx.run_dir) as tmp:
        trial = build_artifact(ctx, "mixed", filled, graph=graph, out_dir=Path(tmp),
                               int8_weights=source.int8_weights, steps=base.steps)
        ev = evaluate_artifact(ctx, trial, reference)
    verdict = powered(ev)
    record = FormatFill(ran=True, fp8_layers=cheaper, calibrator=best8,
                        estimates=_estimates(est), status=verdict.status,
                        n_required=verdict.extra.get("n_required"),
                        why=("powered on dev: the mixed candidate takes the FP8 layers"
                             if verdict.status == "PASS" else
                             f"{verdict.status} on dev with the FP8 layers: the FP16 ones stand"))
    log.info("format fill: %d kept layers in FP8 (%s): %s", len(cheaper), best8, record.why)
    if verdict.status != "PASS":
        return FillResult(None, None, tuple(cheaper), record)
    art = build_artifact(ctx, "mixed", filled, graph=graph,
                         int8_weights=source.int8_weights, steps=base.steps)
    return FillResult(art, evaluate_artifact(ctx, art, reference), tuple(cheaper), record)
