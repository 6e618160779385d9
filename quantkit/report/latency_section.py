"""The report's latency section: per candidate and batch size the percentiles and throughput
with their intervals, what the timings belong to, and the cost projection."""

from __future__ import annotations

from quantkit.record.latency import CostRow, LatencyRecord, LatencySettings, LatencyStats
from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, batch_key, finite, num, pct, text, with_ci

__all__ = ["latency_info", "latency_rows"]


def _vs_fp16(s: LatencyStats) -> str:
    c = s.vs_fp16
    if c is None:
        return ""
    ratio = with_ci(c.median_ratio_vs_fp16, c.median_ratio_vs_fp16_ci, 2)
    flag = "INT8 NOT FASTER than FP16" if c.int8_not_faster else "faster than FP16"
    return f"{flag} (median ratio {ratio}, {text(c.status)})"


def latency_rows(record: RunRecord) -> list[dict[str, str | bool]]:
    """Latency rows: per candidate and batch size, percentiles and throughput with intervals."""
    rows = []
    for name, c in record.candidates.items():
        if c.latency is None:
            continue
        for batch in sorted(c.latency, key=batch_key):
            s = c.latency[batch]
            ms = {p: with_ci(*s.percentile(p), 3) for p in ("p50", "p90", "p99")}
            rows.append({"name": name, "batch": str(batch), **ms,
                         "throughput": with_ci(s.throughput, s.throughput_ci, 1),
                         "n": num(s.n), "vs_fp16": _vs_fp16(s),
                         "flagged": bool(s.vs_fp16 is not None and s.vs_fp16.int8_not_faster)})
    return rows


def _feed_shapes(batch: str, feeds: list[dict[str, list[int]]]) -> str:
    """``batch 32: input_ids [32, 18] / [32, 25] (+ attention_mask)``: the timed feeds' shapes."""
    feeds = [f for f in feeds if f]
    if not feeds:
        return f"batch {batch}: {DASH}"
    first, *rest = list(feeds[0])
    out = f"batch {batch}: {first} " + " / ".join(str(f[first] if first in f else None)
                                                   for f in feeds)
    return out + (f" (+ {', '.join(rest)})" if rest else "")


def _cost_row(name: str, c: CostRow) -> dict[str, str]:
    rng = c.instances_range
    saving = c.saving.saving_vs_fp32 if c.saving is not None else None
    saved = c.saving.instances_saved_vs_fp32 if c.saving is not None else None
    return {
        "name": name,
        "batch": text(c.batch_size),
        "p99": num(c.fit.p99_ms if c.fit is not None else None, 3) if c.fits_budget else DASH,
        "qps": num(c.qps_per_instance, 1),
        "instances": (f"{c.instances}" + (f" [{rng[0]}, {rng[1]}]"
                                          if isinstance(rng, (list, tuple)) and len(rng) == 2
                                          and rng[0] != rng[1] else ""))
        if c.instances else DASH,
        "saving": (f"{pct(saving, 1)} ({saved:+d} instances)"
                   if finite(saving) and isinstance(saved, int)
                   else "FP32 cannot meet the budget" if c.fits_budget else DASH),
        "note": text(c.reason) if not c.fits_budget else ""}


def _method(st: LatencySettings) -> str:
    level = st.level
    return (f"{text(st.warmup)} warm-up runs, then timed runs until "
            f"{text(st.repeats)} runs or {text(st.max_seconds)} s (at least "
            f"{text(st.min_repeats)}), cycling {text(st.feeds)} eval batches, "
            "the same for every candidate; latency per batch; intervals: "
            f"{num(level * 100, 0) + '% ' if finite(level) else ''}percentile bootstrap "
            f"({text(st.n_boot)} resamples, seeded)")


def latency_info(record: RunRecord) -> dict[str, object] | None:
    """What the latency numbers belong to (backend, provider, device, host) and the cost table."""
    lat: LatencyRecord | None = record.latency
    if lat is None:
        return None
    label = lat.label
    host = label.host
    reused = sorted({f"{n} (measured {s.measured_at})"
                     for n, c in record.candidates.items() if c.latency is not None
                     for s in c.latency.values() if s.reused})
    info: dict[str, object] = {
        "reused": reused,
        "execution": text(label.execution), "device": text(label.device),
        "backend": text(label.backend), "providers": text(label.providers),
        "target": text(label.target), "caveat": text(label.caveat),
        "host": f"{text(host.cpu)}, {text(host.cpu_count)} cores, "
                f"intra-op threads {text(host.intra_op_threads)} (0 = ORT default)",
        "method": _method(lat.settings),
        "inputs": [_feed_shapes(b, feeds) for b, feeds in
                   sorted(lat.inputs.items(), key=lambda t: batch_key(t[0]))],
        "skipped": [f"{k}: {v}" for k, v in lat.skipped.items()]
        + [f"batch {k}: {v}" for k, v in lat.skipped_batches.items()],
        "flags": [f"{f.candidate} at batch {f.batch_size}: INT8 / FP16 latency "
                  f"ratio {num(f.ratio.median_ratio_vs_fp16, 2)} (median run by run; "
                  f"{text(f.ratio.status)})" for f in lat.int8_not_faster],
    }
    cost = lat.cost
    fp32 = cost.per_candidate["fp32"] if cost is not None and "fp32" in cost.per_candidate \
        else None
    info["cost_fp32_note"] = (
        "FP32 fits no measured batch size within the P99 budget, so no saving against it can be "
        "computed; raise bench.p99_budget_ms or measure smaller batch sizes to compare"
        if fp32 is not None and not fp32.fits_budget else "")
    info["cost"] = {"target_qps": num(cost.target_qps, 1),
                    "p99_budget_ms": num(cost.p99_budget_ms, 1),
                    "method": text(cost.method),
                    "rows": [_cost_row(n, c) for n, c in cost.per_candidate.items()]} \
        if cost else None
    return info
