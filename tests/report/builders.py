"""Small, valid pieces of a record for the report tests: what a run writes, filled in where a
test only cares about a few values (the record schema is strict: quantkit/record/)."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord


def bare_record(**fields) -> dict:
    """A record of a run that ran nothing (every section empty), with ``fields`` set."""
    rec = RunRecord(experiment="bare", run_dir="/runs/bare", command="", config={}, seed=0,
                    host={"hostname": "h"}, packages={}).to_dict()
    return {**rec, **fields}


def latency(p50_ms: float, *, batch: int = 1, p90_ms: float | None = None,
            p99_ms: float | None = None, throughput: float | None = None) -> dict:
    """One candidate's timings at one batch size, as bench/stage.py records them."""
    p90 = p90_ms if p90_ms is not None else p50_ms * 1.1
    p99 = p99_ms if p99_ms is not None else p50_ms * 1.2
    thr = throughput if throughput is not None else batch * 1000.0 / p50_ms
    return {"n": 20, "batch_size": batch, "level": 0.95, "mean_ms": p50_ms, "min_ms": p50_ms,
            "max_ms": p99, "p50_ms": p50_ms, "p50_ms_ci": [p50_ms, p50_ms], "p90_ms": p90,
            "p90_ms_ci": [p90, p90], "p99_ms": p99, "p99_ms_ci": [p99, p99],
            "throughput": thr, "throughput_ci": [thr, thr], "warmup": 2, "stopped": "repeats",
            "timed_seconds": 0.1, "feeds": 2}


def verdict(status: str, metric: str, point: float, low: float, high: float, *,
            margin: dict | None = None) -> dict:
    """A candidate's verdict on ``metric`` (delta or share ``point`` [low, high])."""
    return {"status": status, "reasons": [f"{metric} {point}"],
            "deltas": {metric: {"point": point, "low": low, "high": high, "level": 0.95,
                                "se": None, "ref": None, "cand": None}},
            "mcnemar": {"b": None, "c": None},
            "margin": {**(margin or {"kind": "absolute", "value": 0.01, "abs": 0.01}),
                       "metric": metric, "threshold": -0.01},
            "n": 100, "required_n": None, "slices": [], "metric": metric, "alpha": 0.05}


def candidate(**fields) -> dict:
    """A candidate entry with the keys every entry has, and ``fields``."""
    return {"numerics": "FP32 on ONNX Runtime CPU", "n": 100, "metrics": {}, **fields}
