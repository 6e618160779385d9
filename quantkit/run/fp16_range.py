"""The FP16 range check of a graph: nodes whose FP32 values exceed the FP16 range on a few
calibration samples stay FP32 (the stage fp16_range_check on the original graph; the ptq stage
on a rewritten one)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quantkit.graph.model_graph import ModelGraph
from quantkit.qdq.casts import fp16_overflow_nodes
from quantkit.run.context import RunContext

__all__ = ["Fp16Range", "check_fp16_range"]


@dataclass(frozen=True)
class Fp16Range:
    """``fp32_nodes``: node -> why it stays FP32 (``build_plan(fp32_nodes_reasons=...)``)."""

    fp32_nodes: dict[str, str]

    def to_record(self) -> dict:
        return {"fp32_nodes": len(self.fp32_nodes)}


def check_fp16_range(ctx: RunContext, graph: ModelGraph) -> Fp16Range:
    """Max |x| of every float tensor on ``compare.fp16_range_samples`` calibration examples
    of ``graph`` (cached by graph, data and count) -> the nodes that would overflow FP16."""
    n = ctx.settings.compare.fp16_range_samples
    inputs = {"model": graph.sha256, "calib": ctx.splits.calib.sha256, "n": n,
              "batch": ctx.settings.compare.batch_size,
              "max_length": ctx.settings.data.max_length, **ctx.feeds_key(),
              **ctx.measured_key()}
    obj, _, _ = ctx.cached("fp16_range", inputs, lambda: (_overflow(ctx, graph, n), None))
    return Fp16Range(fp32_nodes=obj)


def _overflow(ctx: RunContext, graph: ModelGraph, n: int) -> dict[str, str]:
    outs = graph.float32_outputs()
    absmax: dict[str, float] = {}
    # every float tensor is an output: the per-layer debug run's small batches bound memory
    with ctx.runner(graph.model, name="fp16-range", extra_outputs=outs, graph=graph) as r:
        for feed in ctx.batches(ctx.head(ctx.splits.calib, n), ctx.settings.compare.batch_size):
            for t, v in r.infer(feed, outs).items():
                if v.dtype != np.float32 or v.size == 0:
                    continue
                finite = np.abs(v[np.isfinite(v)])
                m = float(finite.max()) if finite.size else 0.0
                absmax[t] = max(absmax.get(t, 0.0), m)
    return fp16_overflow_nodes(graph.model, absmax, infos=graph.infos)
