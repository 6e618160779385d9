"""Latency statistics: percentiles and throughput with seeded bootstrap intervals, the
"INT8 not faster than FP16" comparison and the cost projection. Pure numpy, no I/O.

All latencies are per *batch* in milliseconds. Throughput is samples per second
(``batch_size * 1000 / mean_ms``): what one instance sustains running batches back to back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["PERCENTILES", "latency_stats", "median_ratio", "paired_ratio", "compare_int8_fp16",
           "cost_projection"]

#: Percentiles reported per batch size.
PERCENTILES = (50, 90, 99)

#: Bootstrap resamples are drawn in blocks of at most this many values (bounded memory).
_BLOCK_VALUES = 1 << 20


def _resample_rows(n: int, n_boot: int, rng: np.random.Generator):
    """Yield index blocks of shape (rows, n) whose rows total ``n_boot``; memory stays bounded."""
    rows = max(1, min(n_boot, _BLOCK_VALUES // max(n, 1)))
    done = 0
    while done < n_boot:
        k = min(rows, n_boot - done)
        yield rng.integers(0, n, size=(k, n))
        done += k


def _interval(values: np.ndarray, level: float) -> list[float]:
    lo, hi = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def latency_stats(latencies_ms: Sequence[float] | np.ndarray, batch_size: int, *,
                  n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """P50/P90/P99 batch latency (ms) and throughput (samples/s) with percentile-bootstrap
    intervals over the timed runs.

    With fewer than 100 runs the P99 is close to the slowest run and its interval is wide:
    ``n`` is reported so a reader can judge it.
    """
    x = np.asarray(latencies_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("latency_stats needs a non-empty 1-D array of latencies")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be > 0, got {batch_size}")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("latencies must be finite and > 0")
    rng = np.random.default_rng(seed)
    q = np.array(PERCENTILES, dtype=np.float64)
    boot_p = np.empty((n_boot, len(q)))
    boot_mean = np.empty(n_boot)
    row = 0
    for idx in _resample_rows(x.size, n_boot, rng):
        s = x[idx]
        boot_p[row:row + len(s)] = np.percentile(s, q, axis=1).T
        boot_mean[row:row + len(s)] = s.mean(axis=1)
        row += len(s)
    point = np.percentile(x, q)
    mean = float(x.mean())
    out: dict = {"n": int(x.size), "batch_size": int(batch_size), "level": level,
                 "mean_ms": mean, "min_ms": float(x.min()), "max_ms": float(x.max())}
    for j, p in enumerate(PERCENTILES):
        out[f"p{p}_ms"] = float(point[j])
        out[f"p{p}_ms_ci"] = _interval(boot_p[:, j], level)
    thr = batch_size * 1000.0 / boot_mean
    out["throughput"] = batch_size * 1000.0 / mean
    out["throughput_ci"] = _interval(thr, level)
    return out


def median_ratio(a_ms: Sequence[float] | np.ndarray, b_ms: Sequence[float] | np.ndarray, *,
                 n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """median(a) / median(b) with a bootstrap interval (a and b resampled independently)."""
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("median_ratio needs latencies on both sides")
    rng = np.random.default_rng(seed)
    ratios = np.empty(n_boot)
    row = 0
    for ia in _resample_rows(a.size, n_boot, rng):
        k = len(ia)
        ib = rng.integers(0, b.size, size=(k, b.size))
        ratios[row:row + k] = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
        row += k
    return {"ratio": float(np.median(a) / np.median(b)), "ci": _interval(ratios, level),
            "level": level}


def paired_ratio(a_ms: Sequence[float] | np.ndarray, b_ms: Sequence[float] | np.ndarray, *,
                 n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Median of the per-position ratios a[j] / b[j] (run j of both saw the same input), with
    a bootstrap interval over the pairs. Input size varies between feeds; pairing removes it."""
    m = min(len(a_ms), len(b_ms))
    if m == 0:
        raise ValueError("paired_ratio needs latencies on both sides")
    r = np.asarray(a_ms[:m], dtype=np.float64) / np.asarray(b_ms[:m], dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = np.empty(n_boot)
    row = 0
    for idx in _resample_rows(m, n_boot, rng):
        boot[row:row + len(idx)] = np.median(r[idx], axis=1)
        row += len(idx)
    return {"ratio": float(np.median(r)), "ci": _interval(boot, level), "level": level, "pairs": m}


def compare_int8_fp16(int8_ms: np.ndarray, fp16_ms: np.ndarray, *, n_boot: int = 1000,
                      seed: int = 0, level: float = 0.95) -> dict:
    """Is an INT8 candidate faster than FP16 at this batch size?

    The latency ratio INT8 / FP16 is taken run by run on the same inputs (both timings cycle
    the same feeds from the first, see :func:`~quantkit.bench.timing.time_runner`) and
    summarised by its median with a bootstrap interval. ``int8_not_faster`` is True unless
    the whole interval lies below 1: INT8 was not shown faster. TensorRT often surprises here
    (small batches, reformat layers between INT8 and FP16 regions, no INT8 tactic for a shape).
    """
    r = paired_ratio(int8_ms, fp16_ms, n_boot=n_boot, seed=seed, level=level)
    lo, hi = r["ci"]
    status = "faster" if hi < 1.0 else ("slower" if lo > 1.0 else "no clear difference")
    return {"median_ratio_vs_fp16": r["ratio"], "median_ratio_vs_fp16_ci": r["ci"], "pairs": r["pairs"],
            "status": status, "int8_not_faster": hi >= 1.0}


def cost_projection(per_batch: Mapping[int, Mapping], *, target_qps: float,
                    p99_budget_ms: float, reference: Mapping | None = None) -> dict:
    """Instances needed to serve ``target_qps`` under a P99 batch-latency budget.

    ``per_batch``: batch size -> stats from :func:`latency_stats`. The instance runs the
    largest measured batch whose P99 fits the budget; its sustainable QPS is the throughput
    there; instances = ceil(target_qps / qps). ``reference`` (FP32's projection) gives the
    saving. Queueing delay while a batch fills is not modelled.
    """
    fits = sorted(int(b) for b, s in per_batch.items() if s["p99_ms"] <= p99_budget_ms)
    out: dict = {"target_qps": target_qps, "p99_budget_ms": p99_budget_ms}
    if not fits:
        b, s = min(((int(b), s) for b, s in per_batch.items()), key=lambda t: t[1]["p99_ms"])
        out.update({"fits_budget": False, "batch_size": None, "qps_per_instance": None,
                    "instances": None,
                    "reason": f"no measured batch size has P99 <= {p99_budget_ms:g} ms "
                              f"(best: {s['p99_ms']:.3g} ms at batch {b})"})
    else:
        b = fits[-1]
        s = per_batch[b] if b in per_batch else per_batch[str(b)]
        qps = float(s["throughput"])
        lo, hi = s.get("throughput_ci") or [qps, qps]
        out.update({"fits_budget": True, "batch_size": b, "p99_ms": s["p99_ms"],
                    "qps_per_instance": qps, "qps_per_instance_ci": [lo, hi],
                    "instances": math.ceil(target_qps / qps),
                    "instances_range": [math.ceil(target_qps / hi), math.ceil(target_qps / lo)]})
    if reference is not None:
        ref_n, n = reference.get("instances"), out["instances"]
        if ref_n and n:
            out["instances_saved_vs_fp32"] = ref_n - n
            out["saving_vs_fp32"] = (ref_n - n) / ref_n
        else:
            out["instances_saved_vs_fp32"] = None
            out["saving_vs_fp32"] = None
            out["saving_note"] = ("FP32 does not fit the P99 budget at any measured batch size"
                                  if not ref_n else "this candidate does not fit the P99 budget")
    return out
