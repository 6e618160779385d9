"""Latency statistics, the INT8-vs-FP16 flag and the cost projection (pure numpy)."""

import math

import numpy as np
import pytest

from quantkit.bench.latency_stats import (compare_int8_fp16, cost_projection, latency_stats, median_ratio,
                                  paired_ratio)


def _lat(center: float, n: int = 200, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return center * (1.0 + 0.05 * rng.standard_normal(n)).clip(0.5)


def test_percentiles_throughput_and_intervals():
    x = _lat(10.0)
    s = latency_stats(x, 8, n_boot=500, seed=0)
    for p in (50, 90, 99):
        assert s[f"p{p}_ms"] == pytest.approx(float(np.percentile(x, p)))
        lo, hi = s[f"p{p}_ms_ci"]
        assert lo <= s[f"p{p}_ms"] <= hi and lo < hi
    assert s["p50_ms"] < s["p90_ms"] < s["p99_ms"] <= s["max_ms"]
    assert s["throughput"] == pytest.approx(8 * 1000.0 / x.mean())
    lo, hi = s["throughput_ci"]
    assert lo < s["throughput"] < hi
    assert s["n"] == 200 and s["batch_size"] == 8 and s["level"] == 0.95


def test_intervals_are_seeded_and_shrink_with_more_runs():
    x = _lat(10.0, n=400)
    a = latency_stats(x, 1, n_boot=300, seed=3)
    assert a == latency_stats(x, 1, n_boot=300, seed=3)
    assert a != latency_stats(x, 1, n_boot=300, seed=4)
    small = latency_stats(x[:20], 1, n_boot=300, seed=3)
    width = lambda s: s["p50_ms_ci"][1] - s["p50_ms_ci"][0]  # noqa: E731
    assert width(a) < width(small)


def test_one_run_is_a_degenerate_but_valid_summary():
    s = latency_stats([4.0], 2, n_boot=50)
    assert s["p50_ms"] == s["p99_ms"] == 4.0 and s["p99_ms_ci"] == [4.0, 4.0]
    assert s["throughput"] == 500.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, 0.0], [[1.0, 2.0]]])
def test_bad_latencies_refused(bad):
    with pytest.raises(ValueError):
        latency_stats(bad, 1)


def test_median_ratio_interval_covers_true_ratio():
    r = median_ratio(_lat(5.0, seed=1), _lat(10.0, seed=2), n_boot=500)
    assert r["ratio"] == pytest.approx(0.5, rel=0.05)
    assert r["ci"][0] < 0.5 < r["ci"][1] or r["ci"][0] == pytest.approx(0.5, rel=0.05)


def test_int8_not_faster_flag():
    fp16 = _lat(10.0, seed=2)
    faster = compare_int8_fp16(_lat(6.0, seed=1), fp16, n_boot=500)
    assert faster["status"] == "faster" and faster["int8_not_faster"] is False
    same = compare_int8_fp16(_lat(10.0, seed=5), fp16, n_boot=500)
    assert same["int8_not_faster"] is True and same["status"] == "no clear difference"
    slower = compare_int8_fp16(_lat(13.0, seed=1), fp16, n_boot=500)
    assert slower["status"] == "slower" and slower["int8_not_faster"] is True
    assert slower["median_ratio_vs_fp16"] > 1.2


def _per_batch(spec):
    return {b: {"p99_ms": p99, "throughput": thr, "throughput_ci": [thr * 0.9, thr * 1.1]}
            for b, (p99, thr) in spec.items()}


def test_cost_projection_largest_batch_within_budget_and_saving():
    fp32 = cost_projection(_per_batch({1: (20.0, 60.0), 32: (400.0, 120.0)}),
                           target_qps=1000, p99_budget_ms=100)
    assert fp32["batch_size"] == 1 and fp32["instances"] == math.ceil(1000 / 60)  # 17
    int8 = cost_projection(_per_batch({1: (5.0, 200.0), 32: (80.0, 800.0), 64: (150.0, 900.0)}),
                           target_qps=1000, p99_budget_ms=100, reference=fp32)
    assert int8["batch_size"] == 32 and int8["qps_per_instance"] == 800.0
    assert int8["instances"] == 2
    assert int8["instances_range"] == [math.ceil(1000 / 880), math.ceil(1000 / 720)]
    assert int8["instances_saved_vs_fp32"] == 15
    assert int8["saving_vs_fp32"] == pytest.approx(15 / 17)


def test_cost_projection_when_nothing_fits():
    ref = cost_projection(_per_batch({1: (200.0, 5.0)}), target_qps=10, p99_budget_ms=50)
    assert ref["fits_budget"] is False and ref["instances"] is None
    assert "no measured batch size has P99 <= 50 ms" in ref["reason"]
    c = cost_projection(_per_batch({1: (20.0, 50.0)}), target_qps=10, p99_budget_ms=50,
                        reference=ref)
    assert c["instances"] == 1 and c["saving_vs_fp32"] is None
    assert "FP32 does not fit" in c["saving_note"]


def test_paired_ratio_removes_input_size_variance():
    # four inputs of very different cost, cycled; INT8 is 0.8x FP16 on every one of them
    sizes = np.tile([1.0, 3.0, 9.0, 27.0], 2)
    rng = np.random.default_rng(0)
    fp16 = sizes * 10 * (1 + 0.02 * rng.standard_normal(8))
    int8 = sizes * 8 * (1 + 0.02 * rng.standard_normal(8))
    paired = paired_ratio(int8, fp16, n_boot=500)
    assert paired["ratio"] == pytest.approx(0.8, rel=0.05) and paired["pairs"] == 8
    assert paired["ci"][1] < 1.0  # shown faster, pair by pair
    c = compare_int8_fp16(int8, fp16, n_boot=500)
    assert c["status"] == "faster" and c["int8_not_faster"] is False
    # unpaired, the input sizes swamp the difference
    assert median_ratio(int8, fp16, n_boot=500)["ci"][1] > 1.0
    assert paired_ratio(int8[:5], fp16, n_boot=50)["pairs"] == 5
