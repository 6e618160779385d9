"""Calibrators: contract over the registry, and each method's numerics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from quantkit.graph.grids import ALL_ZERO_AMAX
from quantkit.calibrate.calibrators import (CALIBRATORS, EntropyCalibrator,
                                            MinMaxCalibrator, MseCalibrator,
                                            PercentileCalibrator, entropy_divergences,
                                            make_calibrator, make_calibrators)
from quantkit.calibrate.histogram import HistogramStats
from quantkit.errors import CalibrationError, ConfigError


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(20_000).astype(np.float32)
    b = np.concatenate([rng.laplace(size=10_000) * 2, [25.0, -30.0]]).astype(np.float32)
    return a, b


def fake_quant_mse(x: np.ndarray, amax: float) -> float:
    s = amax / 127.0
    q = np.clip(np.round(x / s), -127, 127) * s
    return float(np.mean((x.astype(np.float64) - q) ** 2))


# -- contract: every registered calibrator -------------------------------------------------
@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_observe_a_then_b_equals_observe_a_plus_b(name):
    a, b = _data()
    streamed = make_calibrator(name).observe(a).observe(b)
    once = make_calibrator(name).observe(np.concatenate([a, b]))
    assert streamed.amax_ == once.amax_
    assert np.isfinite(streamed.amax_) and streamed.amax_ > 0


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_reset_forgets(name):
    a, b = _data()
    cal = make_calibrator(name).observe(b)
    cal.reset()
    with pytest.raises(CalibrationError, match="observed nothing"):
        _ = cal.amax_
    assert cal.observe(a).amax_ == make_calibrator(name).observe(a).amax_


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_params_round_trip(name):
    a, _ = _data()
    cal = make_calibrator(name, num_bins=1024)
    params = cal.get_params()
    assert params["num_bins"] == 1024
    again = make_calibrator(name, **params)
    assert again.get_params() == params and repr(again) == repr(cal)
    stats = HistogramStats(1024).observe(a)
    assert again.compute_amax(stats) == cal.compute_amax(stats)
    assert cal.name == name


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_all_zero_is_safe(name):
    stats = HistogramStats().observe(np.zeros((4, 8), np.float32))
    amax, note = make_calibrator(name).compute_amax_with_note(stats)
    assert amax == ALL_ZERO_AMAX and "all-zero" in note


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
@pytest.mark.parametrize("x", [np.array([1e-30], np.float32),
                               np.array([3.0], np.float32),
                               np.array([0.0, 0.0, 2.0**-70], np.float32),
                               np.array([np.nan, 1.0, -np.inf, 0.5], np.float32)])
def test_never_zero_inf_or_nan(name, x):
    amax = make_calibrator(name).observe(x).amax_
    assert np.isfinite(amax) and amax > 0


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_nothing_finite_observed_raises(name):
    stats = HistogramStats().observe(np.array([np.nan], np.float32))
    with pytest.raises(CalibrationError, match="no finite values"):
        make_calibrator(name).compute_amax(stats)


def test_make_calibrator_errors():
    with pytest.raises(ConfigError) as err:
        make_calibrator("kl")
    assert "'kl'" in str(err.value)
    for valid in CALIBRATORS:
        assert valid in str(err.value)
    with pytest.raises(ConfigError, match="unknown parameter"):
        make_calibrator("minmax", percentile=99.0)
    for bad in (0, -1, 100.5, float("nan"), "99"):
        with pytest.raises(ConfigError, match="percentile"):
            make_calibrator("percentile", percentile=bad)
    with pytest.raises(ConfigError):
        make_calibrator("entropy", num_quant_bins=1)
    with pytest.raises(ConfigError):
        make_calibrator("mse", num_bins=1000)
    assert isinstance(make_calibrator("percentile", percentile=100), PercentileCalibrator)


# -- percentile ------------------------------------------------------------------------------
@pytest.mark.parametrize("q", [99.0, 99.9, 99.99, 100.0])
def test_percentile_within_one_bin_width(q):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(300_000).astype(np.float32) * 2.5
    cal = PercentileCalibrator(q).observe(x)
    assert abs(cal.amax_ - np.percentile(np.abs(x), q)) <= cal.stats_.bin_width
    if q == 100.0:
        assert cal.amax_ == MinMaxCalibrator().observe(x).amax_


# -- entropy ---------------------------------------------------------------------------------
def test_entropy_clips_rare_outliers():
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.standard_normal(200_000), rng.choice([-60.0, 60.0], 20)])
    amax = EntropyCalibrator().observe(x.astype(np.float32)).amax_
    assert 2.0 < amax < 0.5 * 60.0


def test_entropy_equals_minmax_on_uniform():
    rng = np.random.default_rng(9)
    x = rng.uniform(-3.0, 3.0, 200_000).astype(np.float32)
    ent = EntropyCalibrator().observe(x)
    assert abs(ent.amax_ - MinMaxCalibrator().observe(x).amax_) <= ent.stats_.bin_width


def _reference_entropy(hist: np.ndarray, num_quant_bins: int = 128):
    """pytorch-quantization's `_compute_amax_entropy` loop (with scipy), for comparison."""
    bins = hist.astype(np.float64).copy()
    bins[0] = bins[1]
    divs, args = [], []
    counts = np.zeros(num_quant_bins)
    for i in range(num_quant_bins, len(bins) + 1):
        counts.fill(0)
        space = np.linspace(0, i, num=num_quant_bins + 1)
        dig = np.digitize(range(i), space) - 1
        dig[bins[:i] == 0] = -1
        for idx, d in enumerate(dig):
            if d != -1:
                counts[d] += bins[idx]
        for key, val in Counter(dig).items():
            if key != -1:
                counts[key] /= val
        q = np.where(dig != -1, counts[np.maximum(dig, 0)], 0.0)
        p = bins[:i].copy()
        p[-1] += bins[i:].sum()
        divs.append(scipy_entropy(p, q))
        args.append(i)
    divs = np.array(divs)
    best = len(divs) - 1 - int(np.argmin(divs[::-1]))
    return np.array(args), divs, args[best]


def test_entropy_matches_reference_loop():
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.laplace(size=50_000), [14.0]]).astype(np.float32)
    stats = HistogramStats(512).observe(x)
    stop = int(np.flatnonzero(stats.hist_)[-1]) + 1
    hist = stats.hist_[:stop]
    ref_i, ref_kl, ref_best = _reference_entropy(hist)
    h = hist.astype(np.float64)
    h[0] = h[1]
    i, kl = entropy_divergences(h)
    np.testing.assert_array_equal(i, ref_i)
    assert np.array_equal(np.isinf(kl), np.isinf(ref_kl))
    fin = np.isfinite(kl)
    np.testing.assert_allclose(kl[fin], ref_kl[fin], rtol=1e-9, atol=1e-12)
    amax = EntropyCalibrator(num_bins=512).compute_amax(stats)
    assert amax == min(ref_best * stats.bin_width, stats.amax_)
    assert amax < stats.amax_


# -- mse -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gauss", "laplace", "relu", "outliers"])
def test_mse_minimizes_measured_error(kind):
    rng = np.random.default_rng(11)
    n = 200_000
    x = {"gauss": rng.standard_normal(n),
         "laplace": rng.laplace(size=n),
         "relu": np.maximum(rng.standard_normal(n), 0.0),
         "outliers": np.concatenate([rng.standard_normal(n), [50.0, -80.0]])}[kind]
    x = x.astype(np.float32)
    amax = MseCalibrator().observe(x).amax_
    grid = np.linspace(0.02, 1.0, 200) * float(np.abs(x).max())
    measured = np.array([fake_quant_mse(x, a) for a in grid])
    assert fake_quant_mse(x, amax) <= measured.min() * 1.01
    assert amax <= float(np.abs(x).max())


def test_make_calibrators_from_config_options():
    cals = make_calibrators(["entropy", "percentile", "minmax"], percentile=99.9,
                            num_bins=1024, num_quant_bins=64)
    assert list(cals) == ["entropy", "percentile", "minmax"]
    assert cals["percentile"].get_params() == {"percentile": 99.9, "num_bins": 1024}
    assert cals["entropy"].get_params() == {"num_quant_bins": 64, "num_bins": 1024}
    assert make_calibrators(["minmax"], percentile=99.9)["minmax"].get_params() == {
        "num_bins": 2048}
    with pytest.raises(ConfigError, match="kl"):
        make_calibrators(["kl"])
    with pytest.raises(ConfigError, match="bogus"):
        make_calibrators(["mse"], bogus=1)
    with pytest.raises(ConfigError):
        make_calibrators([])


# -- mse on the FP8 E4M3 grid ----------------------------------------------------------------
def test_fp8_error_integral_equals_a_numeric_integral_of_the_fp8_qdq():
    """The closed form integrates the error of qdq/fp8.py's fake quantization (the ORT-exact
    reference), below, across and beyond the saturation point 448 * scale."""
    from quantkit.calibrate.fp8_grid import fp8_error_integral
    from quantkit.qdq.fp8 import fake_quantize_fp8, fp8_scale

    amax = 3.7
    for x in (0.001, 0.5, 2.0, 3.7, 5.0):
        ys = np.linspace(0.0, x, 400_001)
        q = fake_quantize_fp8(ys.astype(np.float32), fp8_scale(amax)).astype(np.float64)
        err = (ys - q) ** 2
        numeric = float(np.sum((err[1:] + err[:-1]) / 2 * np.diff(ys)))
        closed = float(fp8_error_integral(np.array([[x]]), np.array([[amax]]))[0, 0])
        assert closed == pytest.approx(numeric, rel=2e-3)


@pytest.mark.parametrize("kind", ["gauss", "student_t3", "outliers"])
def test_fp8_mse_minimizes_the_measured_fp8_error(kind):
    from quantkit.calibrate.calibrators import Fp8MseCalibrator, make_calibrator
    from quantkit.qdq.fp8 import fake_quantize_fp8, fp8_scale

    rng = np.random.default_rng(12)
    n = 200_000
    x = {"gauss": rng.standard_normal(n), "student_t3": rng.standard_t(3, size=n),
         "outliers": np.concatenate([rng.standard_normal(n), [50.0, -80.0]])}[kind]
    x = x.astype(np.float32)

    def fp8_mse(a: float) -> float:
        return float(np.mean((fake_quantize_fp8(x, fp8_scale(a)) - x) ** 2))

    cal = make_calibrator("mse", grid="fp8")
    assert isinstance(cal, Fp8MseCalibrator)
    amax = cal.observe(x).amax_
    grid = np.linspace(0.02, 1.0, 200) * float(np.abs(x).max())
    assert fp8_mse(amax) <= min(fp8_mse(a) for a in grid) * 1.02
    # FP8's grid is relative: its best range clips far less than INT8's
    assert amax >= MseCalibrator().observe(x).amax_


def test_entropy_has_no_fp8_form():
    with pytest.raises(ConfigError, match="unknown fp8 calibrator"):
        make_calibrator("entropy", grid="fp8")
