"""Calibrated ranges of a graph's tensors: one streaming statistics pass over the calibration
split (stage-cached without the calibrator choice, so every calibrator, every format on the
same graph, every recipe trial and every sweep job reuses one pass), then each calibrator's
ranges. The calibrators come from one factory (:func:`calibrators_for`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from quantkit.calibrate import FP8_CALIBRATORS, collect_stats, compute_ranges
from quantkit.calibrate.calibrators import Calibrator, make_calibrators
from quantkit.calibrate.histogram import HistogramStats
from quantkit.calibrate.ranges import Ranges
from quantkit.graph.model_graph import ModelGraph
from quantkit.run.context import RunContext
from quantkit.settings import CalibratorConfig

__all__ = ["FP8_NO_FORM", "cached_stats", "calibrators_for", "fp8_methods", "source_ranges",
           "statistics_pass"]


#: why a calibrator gets no FP8 candidate
FP8_NO_FORM = ("INT8's 128-level KL method has no FP8 E4M3 form in quantkit; "
               "FP8 candidates use minmax, percentile and mse on the FP8 grid")


def fp8_methods(methods) -> list[str]:
    """The configured calibrators that have an FP8 E4M3 form (``FP8_CALIBRATORS``), in order."""
    return [m for m in methods if m in FP8_CALIBRATORS]


def calibrators_for(config: CalibratorConfig, *, grid: str = "int8",
                    methods: list[str] | None = None) -> dict[str, Calibrator]:
    """name -> calibrator on ``grid`` for ``methods`` (default ``calibrator.methods``; on the
    FP8 grid those with an FP8 form), with the run's ``calibrator.*`` parameters."""
    names = list(config.methods if methods is None else methods)
    if grid == "fp8":
        names = fp8_methods(names)
    if not names:
        return {}
    return make_calibrators(names, grid=grid, percentile=config.percentile,
                            num_quant_bins=config.num_quant_bins)


def source_ranges(ctx: RunContext, graph: ModelGraph, tensors: list[str],
                  calibrators: Mapping[str, Calibrator], *, progress: bool | None = None
                  ) -> dict[str, Ranges]:
    """name -> Ranges of ``tensors`` on ``graph`` for each of ``calibrators`` (the names
    are the Ranges' calibrator names), from the stage-cached statistics pass."""
    if not calibrators:
        return {}
    res = cached_stats(ctx, graph, tensors,
                       lambda: statistics_pass(ctx, graph, tensors, None, progress=progress))
    return compute_ranges(res.stats, dict(calibrators), samples_seen=res.samples_seen)


def statistics_pass(ctx: RunContext, graph: ModelGraph, tensors: list[str], chunks: int | None,
                    *, progress: bool | None = None):
    """One streaming statistics pass over the calibration split on ``graph`` (``chunks``:
    per-chunk statistics too, for the bootstrap; ``progress``: default the run's)."""
    c = ctx.settings.calibrator
    return collect_stats(graph.model, ctx.batches(ctx.splits.calib, c.batch_size), tensors,
                         num_bins=c.num_bins,
                         progress=ctx.settings.progress if progress is None else progress,
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
