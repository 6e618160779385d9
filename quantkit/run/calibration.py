"""Stage "calibration": one streaming FP32 pass over the calibration split -> Ranges for every
calibrator (or ranges loaded from files a previous run saved)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from quantkit.run.context import RunContext
from quantkit.run.scope import QuantScope

__all__ = ["Calibration", "calibrate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """``ranges``: calibrator -> Ranges; ``record``: what record.calibration shows;
    ``info``: the stage's timing line; ``ptq``: the scope's PtqState (quantkit/run/ptq.py),
    carried to build_artifacts (None: no ptq stage ran)."""

    ranges: dict
    record: dict
    info: dict
    ptq: Any = None

    def to_record(self) -> dict:
        out = dict(self.record)
        if self.ptq is not None:
            out["ptq"] = self.ptq.to_record()
        return out


def calibrate(ctx: RunContext, scope: QuantScope) -> Calibration:
    """Ranges of ``scope.tensors`` for every ``calibrator.methods``; saved under ranges/.
    Calibrates ``scope.ptq.graph`` (the ptq-rewritten graph) when the ptq stage ran."""
    from quantkit.calibrate import (bootstrap_ranges, collect_stats, compute_ranges,
                                    make_calibrator, save_ranges, to_trt_calibration_cache)
    from quantkit.errors import CalibrationError

    p, c = ctx.settings.precision, ctx.settings.calibrator
    tensors = list(scope.tensors)
    if not tensors:
        raise CalibrationError("no tensors in the quantization scope", where="precision.op_types",
                               value=list(p.op_types), fix="widen precision.op_types or "
                               "precision.include_nodes")
    state = scope.ptq
    if state is not None and state.graph is not ctx.graph:
        ctx = dataclasses.replace(ctx, graph=state.graph)  # runners typed from this graph
    if c.ranges_files:
        return dataclasses.replace(_load_saved_ranges(c.ranges_files, tensors,
                                                      scope.quant_nodes), ptq=state)
    chunks = 16 if c.bootstrap > 0 else None

    def collect():
        return collect_stats(ctx.graph.model, ctx.batches(ctx.splits.calib, c.batch_size),
                             tensors, num_bins=c.num_bins, progress=ctx.settings.progress,
                             runner_factory=lambda m, outs: ctx.runner(m, name="calibrate",
                                                                       extra_outputs=outs),
                             num_chunks=chunks)

    res = collect() if chunks else _cached_stats(ctx, tensors, collect)  # bootstrap: uncached
    params = {"percentile": {"percentile": c.percentile},
              "entropy": {"num_quant_bins": c.num_quant_bins}}
    cals = {m: make_calibrator(m, **params.get(m, {})) for m in c.methods}
    spread = (bootstrap_ranges(res.chunk_stats, cals, num_resamples=c.bootstrap,
                               seed=ctx.settings.seed) if chunks else None)
    ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen, spread=spread)
    files = {}
    for m, r in ranges.items():
        save_ranges(r, ctx.run_dir / "ranges" / f"{m}.json")
        files[m] = f"ranges/{m}.json"
        to_trt_calibration_cache(r, ctx.run_dir / "ranges" / f"{m}.trt_calib.cache")
    first = next(iter(ranges.values()))
    if first.excluded:
        log.info("calibration left %d tensors unquantized: %s", len(first.excluded),
                 "; ".join(f"{t}: {why}" for t, why in list(first.excluded.items())[:8]))
    record = {"tensors": len(tensors), "quant_nodes": scope.quant_nodes,
              "samples": res.samples_seen, "methods": list(ranges), "excluded": first.excluded,
              "notes": first.notes, "amax": {m: r.amax for m, r in ranges.items()},
              "files": files, "spread": {m: r.spread for m, r in ranges.items() if r.spread},
              "summary": first.summary, "seconds": round(res.seconds, 3)}
    return Calibration(ranges=ranges, record=record,
                       info={"tensors": len(tensors), "samples": res.samples_seen,
                             "collect_seconds": round(res.seconds, 3)}, ptq=state)


def _cached_stats(ctx: RunContext, tensors: list[str], collect):
    """Calibration histograms, cached without the calibrator choice: every calibrator (and
    every sweep job) reuses one pass."""
    from quantkit.calibrate.stats import HistogramStats
    from quantkit.run.ptq import ptq_key

    s, c = ctx.settings, ctx.settings.calibrator
    inputs = {"model": ctx.graph.sha256, "calib": ctx.splits.calib.sha256, "tensors": tensors,
              "num_bins": c.num_bins, "batch_size": c.batch_size,
              "max_length": s.data.max_length, "backend": list(s.backend.providers),
              **ctx.feeds_key(), **ptq_key(ctx)}

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
    record = {"tensors": len(tensors), "quant_nodes": n_nodes, "samples": first.samples_seen,
              "methods": list(ranges), "excluded": first.excluded, "notes": first.notes,
              "amax": {m: r.amax for m, r in ranges.items()}, "files": paths,
              "loaded_from": list(files), "summary": first.summary, "seconds": 0.0}
    return Calibration(ranges=ranges, record=record,
                       info={"tensors": len(tensors), "loaded": len(files)})
