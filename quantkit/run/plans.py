"""The Plan of one calibrator's ranges on a graph (or, without ranges, the fp16 / fp32
candidate's plan), with the run's precision settings: every source builds its plans here."""

from __future__ import annotations

import dataclasses

from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.plan import Plan, build_plan
from quantkit.qdq.targets import activation_ranges
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range

__all__ = ["plan_for_ranges"]


def plan_for_ranges(ctx: RunContext, ranges, overflow: Fp16Range | None,
                    graph: ModelGraph | None = None) -> Plan:
    """The Plan of one calibrator's ranges on ``graph`` (default: the run's; the ptq graph
    for INT8 plans), or without ranges the FP16 / FP32 candidate's plan."""
    p, graph = ctx.settings.precision, graph or ctx.graph
    plan = build_plan(graph.model, amax=ranges.amax if ranges else {},
                      excluded=ranges.excluded if ranges else {}, op_types=p.op_types,
                      include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                      force=dict(p.force), remainder=p.remainder,
                      fp32_nodes_reasons=overflow.fp32_nodes if overflow else {},
                      calibrator=ranges.calibrator if ranges else "", infos=graph.infos,
                      fp32_ops=p.fp32_ops, concat_range_ratio=p.concat_range_ratio)
    if ranges:  # signed min/max for asymmetric targets (ort_cpu); carried by the plan
        seen = activation_ranges(ranges.summary)
        plan = dataclasses.replace(plan, activation_range={
            t: seen[t] for t in plan.activation_amax if t in seen})
    return plan
