"""Stage "calibration": one streaming FP32 pass over the calibration split -> Ranges for every
calibrator (or ranges loaded from files a previous run saved)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from quantkit.calibrate import (
    bootstrap_ranges,
    check_ranges_match,
    compute_ranges,
    load_ranges,
    save_ranges,
    to_trt_calibration_cache,
)
from quantkit.calibrate.ranges import Ranges
from quantkit.errors import CalibrationError
from quantkit.record.calibration import ActivationSummary, CalibrationRecord, Fp8Calibration
from quantkit.run.context import RunContext
from quantkit.run.ranges import FP8_NO_FORM, cached_stats, fp8_methods, statistics_pass
from quantkit.run.stages.ptq import Sources

__all__ = ["Calibration", "calibration"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """``by_format``: format (int8, fp8) -> calibrator -> Ranges on that format's grid, every
    format's from the statistics of its source's calibration graph (one pass per graph);
    ``record``: what record.calibration shows; ``info``: the stage's timing line."""

    by_format: dict[str, dict[str, Ranges]]
    record: CalibrationRecord
    info: dict

    @property
    def ranges(self) -> dict[str, Ranges]:
        """The INT8 ranges, by calibrator."""
        return self.of("int8")

    def of(self, fmt: str) -> dict[str, Ranges]:
        """calibrator -> Ranges of format ``fmt`` (empty when the run writes none)."""
        return dict(self.by_format.get(fmt, {}))

    def to_record(self) -> CalibrationRecord:
        return self.record


def calibration(ctx: RunContext, sources: Sources) -> Calibration:
    """Ranges of every written source's scope on its calibration graph, for each of its
    calibrators (``calibrator.methods``; on the FP8 grid those with an FP8 form): one
    streaming pass per graph (the INT8 recipe's graph; FP8's is the original graph, the same
    pass when the recipe kept no rewrite), stage-cached without the calibrator choice;
    saved under ranges/ (INT8's also as TensorRT calibration caches)."""
    p, c = ctx.settings.precision, ctx.settings.calibrator
    scope = sources.int8.scope
    tensors = list(scope.tensors)
    if not tensors:
        raise CalibrationError("no tensors in the quantization scope", where="precision.op_types",
                               value=list(p.op_types), fix="widen precision.op_types or "
                               "precision.include_nodes")
    if c.ranges_files:
        return _load_saved_ranges(c.ranges_files, tensors, scope.quant_nodes)
    chunks = 16 if c.bootstrap > 0 else None
    passes: dict[tuple, object] = {}  # (graph, tensors) -> its statistics pass
    by_format: dict[str, dict[str, Ranges]] = {}
    for source in sources.writing():
        graph, ts = source.calib_graph, list(source.scope.tensors)
        key = (graph.sha256, tuple(ts))
        if key not in passes:  # bootstrap: chunked and uncached
            passes[key] = (statistics_pass(ctx, graph, ts, chunks) if chunks else
                           cached_stats(ctx, graph, ts,
                                        lambda g=graph, t=ts: statistics_pass(ctx, g, t, None)))
        res = passes[key]
        cals = source.calibrators(c)
        named = {source.ranges_name(m): cal for m, cal in cals.items()}
        spread = (bootstrap_ranges(res.chunk_stats, named, num_resamples=c.bootstrap,
                                   seed=ctx.settings.seed) if chunks and named else None)
        out = compute_ranges(res.stats, named, samples_seen=res.samples_seen, spread=spread)
        by_format[source.format] = {m: out[source.ranges_name(m)] for m in cals}
    res = next(iter(passes.values()))
    ranges, fp8 = by_format.get("int8", {}), by_format.get("fp8", {})
    files = {}
    for fmt, per in by_format.items():
        for r in per.values():
            save_ranges(r, ctx.run_dir / "ranges" / f"{r.calibrator}.json")
            files[r.calibrator] = f"ranges/{r.calibrator}.json"
    for m, r in ranges.items():  # TensorRT's INT8 calibration cache: INT8 scales only
        to_trt_calibration_cache(r, ctx.run_dir / "ranges" / f"{m}.trt_calib.cache")
    first = next(r for per in by_format.values() for r in per.values())
    if first.excluded:
        log.info("calibration left %d tensors unquantized: %s", len(first.excluded),
                 "; ".join(f"{t}: {why}" for t, why in list(first.excluded.items())[:8]))
    record = CalibrationRecord(
        tensors=len(tensors), quant_nodes=scope.quant_nodes,
        samples=res.samples_seen, methods=list(ranges), excluded=first.excluded,
        notes=first.notes, amax={m: r.amax for m, r in ranges.items()},
        files=files, spread={m: r.spread for m, r in ranges.items() if r.spread},
        summary=_summaries(first), seconds=round(res.seconds, 3))
    if fp8:  # FP8 E4M3 ranges (scale = amax / 448) beside INT8's
        record.fp8 = Fp8Calibration(methods=[r.calibrator for r in fp8.values()],
                                    amax={r.calibrator: r.amax for r in fp8.values()},
                                    skipped={m: FP8_NO_FORM for m in c.methods
                                             if m not in fp8_methods(c.methods)})
    return Calibration(by_format=by_format, record=record,
                       info={"tensors": len(tensors), "samples": res.samples_seen,
                             "collect_seconds": round(res.seconds, 3)})


def _load_saved_ranges(files: list[str], tensors: list[str], n_nodes: int) -> Calibration:
    """Ranges from JSON files a previous run saved (``ranges/<calibrator>.json``; FP8 ones
    ``ranges/fp8.<calibrator>.json``)."""
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
    by_format = {"int8": ranges, "fp8": {m.split(".", 1)[1]: r for m, r in fp8.items()}}
    return Calibration(by_format={f: r for f, r in by_format.items() if r}, record=record,
                       info={"tensors": len(tensors), "loaded": len(files)})


def _summaries(ranges) -> dict[str, ActivationSummary]:
    """Each calibrated tensor's statistics of the calibration pass, as the record keeps them."""
    return {t: ActivationSummary(**st) for t, st in ranges.summary.items()}
