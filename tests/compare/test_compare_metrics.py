"""quantkit.compare.metrics: pure metrics, streaming LayerStats, layer flag table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from quantkit.compare.metrics import (
    SQNR_DB_CAP,
    LayerStats,
    clipping_rate,
    cosine_similarity,
    first_diverging,
    flag_layers,
    json_safe_sqnr_db,
    json_safe_stats,
    kl_divergence,
    max_abs_error,
    mean_abs_error,
    relative_error,
    sqnr_db,
)
from quantkit.errors import ConfigError, DataError


def _with_noise_at(reference: np.ndarray, db: float, rng: np.random.Generator) -> np.ndarray:
    """reference + noise scaled so that sum r^2 / sum e^2 is exactly 10^(db/10)."""
    noise = rng.standard_normal(reference.shape)
    target = np.sum(reference**2) / 10 ** (db / 10)
    return reference + noise * math.sqrt(target / np.sum(noise**2))


def test_sqnr_of_known_noise():
    rng = np.random.default_rng(0)
    r = rng.standard_normal((64, 128))
    for db in (10.0, 30.0, 48.0):
        c = _with_noise_at(r, db, rng)
        assert sqnr_db(r, c) == pytest.approx(db, abs=1e-9)
        assert relative_error(r, c) == pytest.approx(10 ** (-db / 20), rel=1e-9)


def test_sqnr_edge_cases_never_nan_and_cap_is_json_safe():
    r = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    assert sqnr_db(r, r) == math.inf
    assert sqnr_db(np.zeros(3), np.zeros(3)) == math.inf
    assert sqnr_db(np.zeros(3), np.ones(3)) == -math.inf
    assert json_safe_sqnr_db(math.inf) == SQNR_DB_CAP
    assert json_safe_sqnr_db(-math.inf) == -SQNR_DB_CAP
    assert json_safe_sqnr_db(42.5) == 42.5
    assert json_safe_sqnr_db(None) is None
    stats = LayerStats().update(np.zeros(4), np.ones(4)).result()
    safe = json_safe_stats(stats)
    assert safe["sqnr_db"] == -SQNR_DB_CAP and safe["relative_error"] is None
    json.dumps(safe, allow_nan=False)


def test_cosine_similarity_cases():
    r = np.array([1.0, 2.0, -3.0])
    assert cosine_similarity(r, 2.5 * r) == pytest.approx(1.0)
    assert cosine_similarity(r, -r) == pytest.approx(-1.0)
    assert cosine_similarity([1.0, 0.0], [0.0, 5.0]) == 0.0
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 1.0
    assert cosine_similarity(np.zeros(3), r) == 0.0
    assert cosine_similarity([3.0, 4.0], [4.0, 3.0]) == pytest.approx(24 / 25)


def test_abs_and_relative_errors_by_hand():
    r = np.array([[1.0, -2.0], [0.5, 4.0]])
    c = np.array([[1.5, -2.0], [0.0, 3.0]])
    assert max_abs_error(r, c) == 1.0
    assert mean_abs_error(r, c) == pytest.approx((0.5 + 0 + 0.5 + 1.0) / 4)
    assert relative_error(r, c) == pytest.approx(math.sqrt(1.5) / math.sqrt(1 + 4 + 0.25 + 16))
    assert relative_error(np.zeros(2), np.zeros(2)) == 0.0
    assert relative_error(np.zeros(2), np.ones(2)) == math.inf


def test_shape_mismatch_and_empty_raise_data_error():
    with pytest.raises(DataError, match="different shapes"):
        sqnr_db(np.ones(3), np.ones(4))
    with pytest.raises(DataError, match="empty"):
        cosine_similarity(np.ones(0), np.ones(0))


def test_clipping_rate_scalar_and_per_channel():
    v = np.array([-3.0, -1.0, 0.0, 1.0, 2.5])
    assert clipping_rate(v, amax=2.0) == pytest.approx(2 / 5)
    assert clipping_rate(v, amax=3.0) == 0.0          # |v| == amax is not clipped
    per_channel = np.array([[1.0, 5.0], [3.0, 0.5]])
    assert clipping_rate(per_channel, amax=np.array([2.0, 1.0])) == pytest.approx(2 / 4)
    with pytest.raises(DataError, match="amax"):
        clipping_rate(v, amax=-1.0)
    with pytest.raises(DataError, match="broadcast"):
        clipping_rate(per_channel, amax=np.ones(3))


def test_kl_divergence():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((50, 7)) * 4
    assert kl_divergence(logits, logits) == 0.0
    assert kl_divergence(logits, logits + 123.0) == pytest.approx(0.0, abs=1e-12)
    # two classes by hand: p = softmax([0, 0]) = (.5, .5), q = softmax([0, ln 3]) = (.25, .75)
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert kl_divergence([0.0, 0.0], [0.0, math.log(3.0)]) == pytest.approx(expected)
    # mean over rows of a 3-D input, huge logits without overflow
    p = np.stack([[[0.0, 0.0]], [[1000.0, 0.0]]])
    q = np.stack([[[0.0, math.log(3.0)]], [[1000.0, 0.0]]])
    assert kl_divergence(p, q) == pytest.approx(expected / 2)
    assert math.isfinite(kl_divergence([1e4, -1e4], [-1e4, 1e4]))


def test_layer_stats_streaming_equals_one_shot():
    rng = np.random.default_rng(2)
    batches = []
    for size in (1, 7, 64, 3, 129):
        r = rng.standard_normal((size, 5, 3)).astype(np.float32) * 3
        c = (r + rng.standard_normal(r.shape).astype(np.float32) * 0.05).astype(np.float32)
        batches.append((r, c))
    amax = 4.5
    stats = LayerStats()
    for r, c in batches:
        stats.update(r, c, amax=amax)
    got = stats.result()
    r_all = np.concatenate([b[0] for b in batches])
    c_all = np.concatenate([b[1] for b in batches])
    assert got["count"] == r_all.size
    assert got["sqnr_db"] == pytest.approx(sqnr_db(r_all, c_all), rel=1e-12)
    assert got["cosine"] == pytest.approx(cosine_similarity(r_all, c_all), rel=1e-12)
    assert got["relative_error"] == pytest.approx(relative_error(r_all, c_all), rel=1e-12)
    assert got["mean_abs_error"] == pytest.approx(mean_abs_error(r_all, c_all), rel=1e-12)
    assert got["max_abs_error"] == max_abs_error(r_all, c_all)
    assert got["clipping_rate"] == clipping_rate(r_all, amax=amax)
    assert got["clipping_rate"] > 0


def test_layer_stats_merge_reset_and_state_round_trip():
    rng = np.random.default_rng(3)
    data = [(rng.standard_normal(40), rng.standard_normal(40)) for _ in range(6)]
    whole = LayerStats()
    for r, c in data:
        whole.update(r, c, amax=1.0)
    first, second = LayerStats(), LayerStats()
    for r, c in data[:2]:
        first.update(r, c, amax=1.0)
    for r, c in data[2:]:
        second.update(r, c, amax=1.0)
    merged = first.merge(second).result()
    for key, value in whole.result().items():
        assert merged[key] == pytest.approx(value, rel=1e-12)
    restored = LayerStats.from_state(json.loads(json.dumps(whole.state())))
    assert restored.result() == whole.result()
    whole.reset()
    with pytest.raises(DataError, match="no elements"):
        whole.result()


def test_layer_stats_clipping_none_without_amax_and_shape_check():
    stats = LayerStats().update(np.ones(3), np.ones(3))
    assert stats.result()["clipping_rate"] is None
    assert stats.result()["sqnr_db"] == math.inf
    with pytest.raises(DataError):
        stats.update(np.ones(3), np.ones(2))


def _stats_at(db: float) -> dict:
    return {"sqnr_db": db}


def test_flag_layers_and_first_diverging():
    order = ["input", "conv1", "relu1", "conv2", "softmax", "argmax"]
    fp16 = {"input": _stats_at(math.inf), "conv1": _stats_at(70.0), "relu1": _stats_at(70.0),
            "conv2": _stats_at(65.0), "softmax": _stats_at(60.0)}
    int8 = {"input": _stats_at(math.inf), "conv1": _stats_at(45.0),   # 10^-4.5 vs 10^-7
            "relu1": _stats_at(59.5),                                  # ratio 10^1.05 = 11.2
            "conv2": _stats_at(30.0), "softmax": _stats_at(58.0)}      # ratio 1.58
    rows = flag_layers(int8, fp16, order=order)
    assert [r["name"] for r in rows] == ["input", "conv1", "relu1", "conv2", "softmax"]
    flagged = {r["name"]: r["flagged"] for r in rows}
    assert flagged == {"input": False, "conv1": True, "relu1": True, "conv2": True,
                       "softmax": False}
    conv1 = rows[1]
    assert conv1["ratio"] == pytest.approx(10 ** 2.5)
    assert conv1["position"] == 1
    assert first_diverging(int8, fp16, order=order) == "conv1"
    assert first_diverging(int8, fp16, order=order, floor_multiple=1000.0) == "conv2"
    assert first_diverging(int8, fp16, order=order, floor_multiple=1e9) is None
    # reversed topological order changes which one is "first"
    assert first_diverging(int8, fp16, order=order[::-1]) == "conv2"


def test_flag_layers_exact_fp16_uses_min_floor():
    int8 = {"a": _stats_at(75.0), "b": _stats_at(65.0)}
    fp16 = {"a": _stats_at(math.inf)}                   # exact in fp16; "b" has no fp16 stats
    rows = flag_layers(int8, fp16, order=["a", "b"], min_noise_floor=1e-8)
    assert rows[0]["floor"] == 1e-8 and rows[0]["flagged"] is False   # ratio 3.16
    assert rows[1]["fp16_sqnr_db"] is None and rows[1]["flagged"] is True  # ratio 31.6
    with pytest.raises(ConfigError, match="floor_multiple"):
        flag_layers(int8, fp16, order=["a"], floor_multiple=0)
