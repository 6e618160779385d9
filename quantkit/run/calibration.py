"""Stage "calibration": one streaming FP32 pass over the calibration split -> Ranges for every
calibrator (or ranges loaded from files a previous run saved)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

from quantkit.run.context import RunContext

if TYPE_CHECKING:
    from quantkit.graph.model_graph import ModelGraph
    from quantkit.run.quant_source import QuantSource

__all__ = ["Calibration", "calibrate", "fp8_ranges_on"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """``ranges``: calibrator -> Ranges on the INT8 grid; ``fp8_ranges``: ``fp8.<calibrator>``
    -> Ranges on the FP8 E4M3 grid, from the same statistics (empty unless
    ``precision.formats`` has fp8); ``record``: what record.calibration shows; ``info``: the
    stage's timing line."""

    ranges: dict
    record: dict
    info: dict
    fp8_ranges: dict = field(default_factory=dict)

    def to_record(self) -> dict:
        return dict(self.record)


def calibrate(ctx: RunContext, source: QuantSource) -> Calibration:
    """Ranges of ``source.scope.tensors`` on ``source.graph`` (the graph that gets quantized)
    for every ``calibrator.methods``; with fp8 in ``precision.formats``, FP8-grid ranges of
    the original graph's scope (FP8 candidates take no ptq rewrite; the same pass when the
    recipe kept none); saved under ranges/."""
    from quantkit.calibrate import (bootstrap_ranges, compute_ranges, make_calibrator,
                                    save_ranges, to_trt_calibration_cache)
    from quantkit.errors import CalibrationError

    p, c = ctx.settings.precision, ctx.settings.calibrator
    scope, graph = source.scope, source.graph
    tensors = list(scope.tensors)
    if not tensors:
        raise CalibrationError("no tensors in the quantization scope", where="precision.op_types",
                               value=list(p.op_types), fix="widen precision.op_types or "
                               "precision.include_nodes")
    if c.ranges_files:
        return _load_saved_ranges(c.ranges_files, tensors, scope.quant_nodes)
    chunks = 16 if c.bootstrap > 0 else None

    def collect(graph=graph, tensors=tensors, chunks=chunks):
        return _collect(ctx, graph, tensors, chunks)

    res = collect() if chunks else cached_stats(ctx, graph, tensors, collect)  # bootstrap: uncached
    params = {"percentile": {"percentile": c.percentile},
              "entropy": {"num_quant_bins": c.num_quant_bins}}
    formats = p.formats
    cals = ({m: make_calibrator(m, **params.get(m, {})) for m in c.methods}
            if "int8" in formats else {})
    fp8_cals = ({f"fp8.{m}": make_calibrator(m, grid="fp8", **params.get(m, {}))
                 for m in fp8_methods(c.methods)} if "fp8" in formats else {})
    spread = (bootstrap_ranges(res.chunk_stats, cals, num_resamples=c.bootstrap,
                               seed=ctx.settings.seed) if chunks and cals else None)
    ranges = (compute_ranges(res.stats, cals, samples_seen=res.samples_seen, spread=spread)
              if cals else {})
    fp8 = {}
    if fp8_cals:  # FP8 candidates are planned on the original graph: its statistics
        fres = res
        if source.is_rewritten:  # a second pass (stage-cached) over the original graph
            from quantkit.run.scope import quant_scope

            orig = list(quant_scope(ctx).tensors)
            fres = cached_stats(ctx, ctx.graph, orig,
                                lambda: collect(ctx.graph, orig, None))
        fp8 = compute_ranges(fres.stats, fp8_cals, samples_seen=fres.samples_seen)
    files = {}
    for m, r in {**ranges, **fp8}.items():
        save_ranges(r, ctx.run_dir / "ranges" / f"{m}.json")
        files[m] = f"ranges/{m}.json"
    for m, r in ranges.items():  # TensorRT's INT8 calibration cache: INT8 scales only
        to_trt_calibration_cache(r, ctx.run_dir / "ranges" / f"{m}.trt_calib.cache")
    first = next(iter({**ranges, **fp8}.values()))
    if first.excluded:
        log.info("calibration left %d tensors unquantized: %s", len(first.excluded),
                 "; ".join(f"{t}: {why}" for t, why in list(first.excluded.items())[:8]))
    record = {"tensors": len(tensors), "quant_nodes": scope.quant_nodes,
              "samples": res.samples_seen, "methods": list(ranges), "excluded": first.excluded,
              "notes": first.notes, "amax": {m: r.amax for m, r in ranges.items()},
              "files": files, "spread": {m: r.spread for m, r in ranges.items() if r.spread},
              "summary": first.summary, "seconds": round(res.seconds, 3)}
    if fp8:  # FP8 E4M3 ranges (scale = amax / 448) beside INT8's, from the same pass
        record["fp8"] = {"methods": list(fp8), "amax": {m: r.amax for m, r in fp8.items()},
                         "skipped": {m: FP8_NO_FORM for m in c.methods
                                     if m not in fp8_methods(c.methods)}}
    return Calibration(ranges=ranges, record=record, fp8_ranges=fp8,
                       info={"tensors": len(tensors), "samples": res.samples_seen,
                             "collect_seconds": round(res.seconds, 3)})


#: why a calibrator gets no FP8 candidate
FP8_NO_FORM = ("INT8's 128-level KL method has no FP8 E4M3 form in quantkit; "
               "FP8 candidates use minmax, percentile and mse on the FP8 grid")


def fp8_methods(methods) -> list[str]:
    """The configured calibrators that have an FP8 E4M3 form (``FP8_CALIBRATORS``), in order."""
    from quantkit.calibrate import FP8_CALIBRATORS

    return [m for m in methods if m in FP8_CALIBRATORS]


def fp8_ranges_on(ctx: RunContext, graph: ModelGraph, tensors: list[str], method: str):
    """FP8-grid Ranges (calibrator ``method``) of ``tensors`` on ``graph``: one stage-cached
    statistics pass over the calibration split (the mixed search's FP8 layers, on the graph
    their plan is built from)."""
    from quantkit.calibrate import compute_ranges, make_calibrator

    c = ctx.settings.calibrator
    res = cached_stats(ctx, graph, tensors, lambda: _collect(ctx, graph, tensors, None))
    params = {"percentile": {"percentile": c.percentile}}.get(method, {})
    cal = {f"fp8.{method}": make_calibrator(method, grid="fp8", **params)}
    return compute_ranges(res.stats, cal, samples_seen=res.samples_seen)[f"fp8.{method}"]


def _collect(ctx: RunContext, graph: ModelGraph, tensors: list[str], chunks: int | None):
    """One streaming statistics pass over the calibration split on ``graph``."""
    from quantkit.calibrate import collect_stats

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
    from quantkit.calibrate.histogram import HistogramStats

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


def _load_saved_ranges(files: list[str], tensors: list[str], n_nodes: int) -> Calibration:
    """Ranges from JSON files a previous run saved (``ranges/<calibrator>.json``)."""
    from quantkit.calibrate import check_ranges_match, load_ranges
    from quantkit.errors import CalibrationError

    ranges, paths = {}, {}
    for f in files:
        r = load_ranges(f)
        check_ranges_match(r, tensors)
        if r.calibrator in ranges:
            raise CalibrationError("two ranges files name the same calibrator",
                                   where="calibrator.ranges_files", value=r.calibrator,
                                   fix="list one ranges file per calibrator")
        ranges[r.calibrator] = r
        paths[r.calibrator] = f
    first = next(iter(ranges.values()))
    log.info("calibration skipped: ranges loaded from %s", ", ".join(files))
    fp8 = {m: r for m, r in ranges.items() if m.startswith("fp8.")}  # saved FP8 ranges
    ranges = {m: r for m, r in ranges.items() if m not in fp8}
    record = {"tensors": len(tensors), "quant_nodes": n_nodes, "samples": first.samples_seen,
              "methods": list(ranges), "excluded": first.excluded, "notes": first.notes,
              "amax": {m: r.amax for m, r in ranges.items()}, "files": paths,
              "loaded_from": list(files), "summary": first.summary, "seconds": 0.0}
    if fp8:
        record["fp8"] = {"methods": list(fp8), "amax": {m: r.amax for m, r in fp8.items()}}
    return Calibration(ranges=ranges, record=record, fp8_ranges=fp8,
                       info={"tensors": len(tensors), "loaded": len(files)})
