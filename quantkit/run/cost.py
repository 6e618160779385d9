"""The cost model's view of a run: the run graph's GEMM shapes and each candidate's estimated
GEMM time on the target GPU (``gpu.sm``; quantkit/precision/plan_cost.py)."""

from __future__ import annotations

from quantkit.precision.plan_cost import estimate_plan, gemm_shapes
from quantkit.run.context import RunContext

__all__ = ["estimated_cost", "run_gemm_shapes"]


def estimated_cost(ctx: RunContext, artifacts: dict) -> dict:
    """name -> PlanEstimate of each candidate's GEMM time on ``gpu.sm`` (empty when no target
    GPU is set): at the largest ``bench.batch_sizes`` and ``data.max_length``."""
    s = ctx.settings
    if s.gpu.sm is None:
        return {}
    shapes, where = run_gemm_shapes(ctx)
    return {n: estimate_plan(a.plan, shapes, s.gpu.sm, shape=where) for n, a in artifacts.items()}


def run_gemm_shapes(ctx: RunContext) -> tuple[dict, str]:
    """The run graph's GEMM shapes for the cost model (``plan_cost.gemm_shapes``) at the
    largest ``bench.batch_sizes`` and ``data.max_length``, and a line saying so."""
    s = ctx.settings
    batch, length = max(s.bench.batch_sizes), int(s.data.max_length or 1)
    shapes = gemm_shapes(ctx.graph.model, ctx.graph.infos, batch=batch, length=length)
    return shapes, f"batch {batch}, length {length} where the model's shape is symbolic"
