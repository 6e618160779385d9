"""HistogramStats: exact streaming, order independence, counters, serialization."""

from __future__ import annotations

import json

import numpy as np
import pytest

from quantkit.calibrate.histogram import HistogramStats, combine_stats
from quantkit.errors import CalibrationError, ConfigError


def _same(a: HistogramStats, b: HistogramStats) -> None:
    np.testing.assert_array_equal(a.hist_, b.hist_)
    assert a.range_ == b.range_
    assert (a.count_, a.n_nonfinite_, a.n_zero_) == (b.count_, b.n_nonfinite_, b.n_zero_)
    assert (a.amax_, a.min_, a.max_) == (b.amax_, b.min_, b.max_)
    assert a.sum_ == pytest.approx(b.sum_, rel=1e-5, abs=1e-3)
    assert a.sumsq_ == pytest.approx(b.sumsq_, rel=1e-5)


def test_streaming_equals_one_shot_across_range_growth():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(1000).astype(np.float32) * s for s in (0.01, 1.0, 0.5, 300.0)]
    streamed = HistogramStats(256)
    for p in parts:
        streamed.observe(p)
    _same(streamed, HistogramStats(256).observe(np.concatenate(parts)))
    # reversed order gives the same histogram too
    rev = HistogramStats(256)
    for p in parts[::-1]:
        rev.observe(p)
    _same(rev, streamed)


def test_values_on_bin_edges_rebin_exactly():
    # exact multiples of the bin width land on edges; growth must keep them in place
    small = (np.arange(64, dtype=np.float32) / 64.0)            # range 1 -> edges k/64
    big = np.array([3.0, -7.5], dtype=np.float32)               # range grows to 8
    s = HistogramStats(64).observe(small).observe(big)
    _same(s, HistogramStats(64).observe(np.concatenate([small, big])))
    assert s.range_ == 8.0


def test_range_is_power_of_two_above_amax():
    s = HistogramStats().observe(np.array([0.75, -3.0], np.float32))
    assert s.range_ == 4.0 and s.amax_ == 3.0
    s.observe(np.array([4.0], np.float32))  # amax == 4 -> range 8 (strictly greater)
    assert s.range_ == 8.0
    assert s.hist_.sum() == s.count_ == 3


def test_large_array_crosses_internal_chunks():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(700_000).astype(np.float32)
    x[650_000] = 40.0  # growth inside a later chunk
    one = HistogramStats().observe(x)
    two = HistogramStats().observe(x[:123_457]).observe(x[123_457:])
    _same(one, two)
    assert one.amax_ == 40.0 and one.hist_.sum() == x.size


def test_nonfinite_counted_not_binned():
    x = np.array([1.0, np.nan, -np.inf, np.inf, -2.0, 0.0], np.float32)
    s = HistogramStats().observe(x)
    assert s.n_nonfinite_ == 3 and s.count_ == 3 and s.hist_.sum() == 3
    assert s.amax_ == 2.0 and s.min_ == -2.0 and s.max_ == 1.0 and s.n_zero_ == 1
    only_bad = HistogramStats().observe(np.array([np.nan, np.inf], np.float32))
    assert only_bad.count_ == 0 and only_bad.n_nonfinite_ == 2 and only_bad.hist_.sum() == 0


def test_zeros_then_growth():
    s = HistogramStats(16).observe(np.zeros(10, np.float32))
    assert s.range_ == 0.0 and s.hist_[0] == 10 and s.amax_ == 0.0 and s.n_zero_ == 10
    s.observe(np.array([5.0], np.float32))
    assert s.hist_[0] == 10 and s.hist_.sum() == 11 and s.range_ == 8.0


def test_moments_and_dtypes():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(50_000) * 3 + 1).astype(np.float64)
    s = HistogramStats().observe(x)
    assert s.mean == pytest.approx(x.mean(), rel=1e-4)
    assert s.std == pytest.approx(x.std(), rel=1e-4)
    h16 = HistogramStats().observe(np.array([1.5, -2.25], np.float16))
    assert h16.amax_ == 2.25
    hint = HistogramStats().observe(np.array([3, -4], np.int64))
    assert hint.amax_ == 4.0
    huge = HistogramStats().observe(np.array([1e300, 1.0]))  # beyond float32 -> non-finite
    assert huge.n_nonfinite_ == 1 and huge.count_ == 1


@pytest.mark.parametrize("q", [50, 90, 99, 99.9, 99.99, 100])
def test_percentile_within_one_bin_of_numpy(q):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(200_000).astype(np.float32)
    s = HistogramStats().observe(x)
    assert abs(s.percentile(q) - np.percentile(np.abs(x), q)) <= s.bin_width


def test_merge_and_combine_are_exact():
    rng = np.random.default_rng(4)
    a = rng.standard_normal(5000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32) * 20
    sa, sb = HistogramStats(512).observe(a), HistogramStats(512).observe(b)
    _same(sa.copy().merge(sb), HistogramStats(512).observe(np.concatenate([a, b])))
    _same(sb.copy().merge(sa), sa.copy().merge(sb))
    _same(combine_stats([sa, sb], [2, 1]),
          HistogramStats(512).observe(np.concatenate([a, a, b])))
    empty = combine_stats([sa, sb], [0, 0])
    assert empty.count_ == 0
    with pytest.raises(CalibrationError):
        sa.merge(HistogramStats(256))


def test_reset_and_dict_round_trip():
    rng = np.random.default_rng(5)
    s = HistogramStats(128).observe(rng.standard_normal(1000).astype(np.float32))
    back = HistogramStats.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s
    _same(back, s)
    s.reset()
    assert s.count_ == 0 and s.hist_.sum() == 0 and s.range_ == 0.0 and s.min_ is None
    assert HistogramStats.from_dict(s.to_dict()) == s
    with pytest.raises(CalibrationError):
        HistogramStats.from_dict({"num_bins": 128})
    bad = back.to_dict()
    bad["range"] = 3.0
    with pytest.raises(CalibrationError, match="power of two"):
        HistogramStats.from_dict(bad)


@pytest.mark.parametrize("bins", [0, 1, 100, 2.0, True])
def test_num_bins_must_be_power_of_two(bins):
    with pytest.raises(ConfigError):
        HistogramStats(bins)


def test_summary_is_json_safe():
    s = HistogramStats().observe(np.array([1.0, -2.0, np.nan], np.float32))
    summ = s.summary()
    json.dumps(summ, allow_nan=False)
    assert summ["count"] == 2 and summ["n_nonfinite"] == 1 and summ["amax"] == 2.0
    json.dumps(HistogramStats().summary(), allow_nan=False)


def test_sum_of_squares_stays_finite_below_the_old_1e18_cutoff():
    """amax 1e17 over 2**18 values: float32 squares overflow (1e34 * 2.6e5 > 3.4e38); the
    float64 path must take over (it did only above amax 1e18)."""
    import numpy as np

    from quantkit.calibrate.histogram import HistogramStats

    h = HistogramStats().observe(np.full(1 << 18, 1e17, np.float32))
    assert np.isfinite(h.sumsq_) and np.isclose(h.sumsq_, (1 << 18) * float(np.float32(1e17)) ** 2)
    assert h.std < 1e9  # std of a constant: ~0 relative to 1e17
