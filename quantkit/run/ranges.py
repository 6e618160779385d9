"""Calibrated ranges of a graph's tensors: one streaming statistics pass over the calibration
split (stage-cached without the calibrator choice, so every calibrator, every recipe trial and
every sweep job on the same graph reuses one pass), then each calibrator's ranges."""

from __future__ import annotations

from types import SimpleNamespace

from quantkit.calibrate import FP8_CALIBRATORS, collect_stats, compute_ranges, make_calibrator
from quantkit.calibrate.histogram import HistogramStats
from quantkit.graph.model_graph import ModelGraph
from quantkit.run.context import RunContext

__all__ = ["FP8_NO_FORM", "cached_stats", "fp8_methods", "fp8_ranges_on", "statistics_pass"]


#: why a calibrator gets no FP8 candidate
FP8_NO_FORM = ("INT8's 128-level KL method has no FP8 E4M3 form in quantkit; "
               "FP8 candidates use minmax, percentile and mse on the FP8 grid")


def fp8_methods(methods) -> list[str]:
    """The configured calibrators that have an FP8 E4M3 form (``FP8_CALIBRATORS``), in order."""
    return [m for m in methods if m in FP8_CALIBRATORS]


def fp8_ranges_on(ctx: RunContext, graph: ModelGraph, tensors: list[str], method: str):
    """FP8-grid Ranges (calibrator ``method``) of ``tensors`` on ``graph``: one stage-cached
    statistics pass over the calibration split (the mixed search's FP8 layers, on the graph
    their plan is built from)."""
    c = ctx.settings.calibrator
    res = cached_stats(ctx, graph, tensors, lambda: statistics_pass(ctx, graph, tensors, None))
    params = {"percentile": {"percentile": c.percentile}}.get(method, {})
    cal = {f"fp8.{method}": make_calibrator(method, grid="fp8", **params)}
    return compute_ranges(res.stats, cal, samples_seen=res.samples_seen)[f"fp8.{method}"]


def statistics_pass(ctx: RunContext, graph: ModelGraph, tensors: list[str], chunks: int | None):
    """One streaming statistics pass over the calibration split on ``graph``."""
    c = ctx.settings.calibrator
    return collect_stats(graph.model, ctx.batches(ctx.splits.calib, c.batch_size), tensors,
                         num_bins=c.num_bins, progress=ctx.settings.progress,
                         runner_factory=lambda m, outs: ctx.runner(m, name="calibrate",
                                                                   extra_outputs=outs,
                                                                   graph=graph),
                         num_chunks=chunks)


def cached_stats(ctx: RunContext, graph: ModelGraph, tensors: list[str], collect):
    """Calibration histograms of ``graph``, cached without the calibrator choice: every
    calibrator (every sweep job, every recipe auto tries on this graph) reuses one pass."""
    s, c = ctx.settings, ctx.settings.calibrator
    inputs = {"model": graph.sha256, "calib": ctx.splits.calib.sha256, "tensors": tensors,
              "num_bins": c.num_bins, "batch_size": c.batch_size,
              "max_length": s.data.max_length, "backend": list(s.backend.providers),
              **ctx.feeds_key(), **ctx.measured_key()}

    def compute():
        res = collect()
        return ({"stats": {t: st.to_dict() for t, st in res.stats.items()},
                 "samples_seen": res.samples_seen, "seconds": res.seconds}, None)

    obj, _, hit = ctx.cached("calibration_stats", inputs, compute)
    stats = {t: HistogramStats.from_dict(d) for t, d in obj["stats"].items()}
    return SimpleNamespace(stats=stats, samples_seen=obj["samples_seen"],
                           seconds=0.0 if hit else obj["seconds"], chunk_stats=None)
