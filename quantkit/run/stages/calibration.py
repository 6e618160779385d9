"""Stage "calibration": one streaming FP32 pass over the calibration split -> Ranges for every
calibrator (or ranges loaded from files a previous run saved)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from quantkit.calibrate import (
    bootstrap_ranges,
    check_ranges_match,
    compute_ranges,
    load_ranges,
    make_calibrator,
    save_ranges,
    to_trt_calibration_cache,
)
from quantkit.errors import CalibrationError
from quantkit.record.calibration import ActivationSummary, CalibrationRecord, Fp8Calibration
from quantkit.run.context import RunContext
from quantkit.run.quant_source import QuantSource
from quantkit.run.ranges import FP8_NO_FORM, cached_stats, fp8_methods, statistics_pass
from quantkit.run.scope import quant_scope

__all__ = ["Calibration", "calibration"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """``ranges``: calibrator -> Ranges on the INT8 grid; ``fp8_ranges``: ``fp8.<calibrator>``
    -> Ranges on the FP8 E4M3 grid, from the same statistics (empty unless
    ``precision.formats`` has fp8); ``record``: what record.calibration shows; ``info``: the
    stage's timing line."""

    ranges: dict
    record: CalibrationRecord
    info: dict
    fp8_ranges: dict = field(default_factory=dict)

    def to_record(self) -> CalibrationRecord:
        return self.record


def calibration(ctx: RunContext, source: QuantSource) -> Calibration:
    """Ranges of ``source.scope.tensors`` on ``source.graph`` (the graph that gets quantized)
    for every ``calibrator.methods``; with fp8 in ``precision.formats``, FP8-grid ranges of
    the original graph's scope (FP8 candidates take no ptq rewrite; the same pass when the
    recipe kept none); saved under ranges/."""
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
        return statistics_pass(ctx, graph, tensors, chunks)

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
            orig = list(quant_scope(ctx, ctx.graph).tensors)
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
    record = CalibrationRecord(
        tensors=len(tensors), quant_nodes=scope.quant_nodes,
        samples=res.samples_seen, methods=list(ranges), excluded=first.excluded,
        notes=first.notes, amax={m: r.amax for m, r in ranges.items()},
        files=files, spread={m: r.spread for m, r in ranges.items() if r.spread},
        summary=_summaries(first), seconds=round(res.seconds, 3))
    if fp8:  # FP8 E4M3 ranges (scale = amax / 448) beside INT8's, from the same pass
        record.fp8 = Fp8Calibration(methods=list(fp8), amax={m: r.amax for m, r in fp8.items()},
                                    skipped={m: FP8_NO_FORM for m in c.methods
                                             if m not in fp8_methods(c.methods)})
    return Calibration(ranges=ranges, record=record, fp8_ranges=fp8,
                       info={"tensors": len(tensors), "samples": res.samples_seen,
                             "collect_seconds": round(res.seconds, 3)})


def _load_saved_ranges(files: list[str], tensors: list[str], n_nodes: int) -> Calibration:
    """Ranges from JSON files a previous run saved (``ranges/<calibrator>.json``)."""
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
    record = CalibrationRecord(
        tensors=len(tensors), quant_nodes=n_nodes, samples=first.samples_seen,
        methods=list(ranges), excluded=first.excluded, notes=first.notes,
        amax={m: r.amax for m, r in ranges.items()}, files=paths,
        loaded_from=list(files), summary=_summaries(first), seconds=0.0)
    if fp8:
        record.fp8 = Fp8Calibration(methods=list(fp8), amax={m: r.amax for m, r in fp8.items()})
    return Calibration(ranges=ranges, record=record, fp8_ranges=fp8,
                       info={"tensors": len(tensors), "loaded": len(files)})


def _summaries(ranges) -> dict[str, ActivationSummary]:
    """Each calibrated tensor's statistics of the calibration pass, as the record keeps them."""
    return {t: ActivationSummary(**st) for t, st in ranges.summary.items()}
