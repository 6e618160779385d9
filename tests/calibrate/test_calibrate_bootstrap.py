"""Bootstrap spread of amax over calibration chunks."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.calibrate import CALIBRATORS, HistogramStats, bootstrap_ranges, compute_ranges
from quantkit.calibrate import make_calibrator
from quantkit.errors import CalibrationError

CALS = {name: make_calibrator(name) for name in CALIBRATORS}


def _chunks(k: int, identical: bool) -> list[dict[str, HistogramStats]]:
    rng = np.random.default_rng(0)
    same = rng.standard_normal(4000).astype(np.float32)
    out = []
    for _ in range(k):
        x = same if identical else np.concatenate(
            [rng.standard_normal(4000), rng.laplace(size=50) * 4]).astype(np.float32)
        out.append({"t": HistogramStats().observe(x),
                    "bad": HistogramStats().observe(np.array([1.0, np.nan], np.float32))})
    return out


def test_identical_chunks_have_zero_spread():
    spread = bootstrap_ranges(_chunks(8, identical=True), CALS, num_resamples=8)
    assert set(spread) == set(CALS)
    for name, per_tensor in spread.items():
        assert "bad" not in per_tensor  # non-finite tensors are excluded
        s = per_tensor["t"]
        assert s.std == 0.0 and s.rel_spread == 0.0 and s.min == s.max == s.amax
        assert s.num_resamples == 8


def test_spread_is_finite_and_seeded():
    chunks = _chunks(6, identical=False)
    a = bootstrap_ranges(chunks, CALS, num_resamples=10, seed=3)
    b = bootstrap_ranges(chunks, CALS, num_resamples=10, seed=3)
    assert a == b
    for per_tensor in a.values():
        s = per_tensor["t"]
        assert all(np.isfinite(v) for v in (s.mean, s.std, s.min, s.max, s.rel_spread))
        assert 0 < s.min <= s.mean <= s.max and s.std >= 0
    assert a["minmax"]["t"].std > 0  # outliers differ between chunks
    stats = {"t": chunks[0]["t"].copy()}
    for c in chunks[1:]:
        stats["t"].merge(c["t"])
    ranges = compute_ranges(stats, CALS, spread=a)
    assert ranges["mse"].spread["t"]["std"] == a["mse"]["t"].std
    assert ranges["mse"].spread["t"]["amax"] == ranges["mse"].amax["t"]


def test_bootstrap_errors():
    with pytest.raises(CalibrationError, match="at least 2"):
        bootstrap_ranges(_chunks(1, identical=True), CALS)
    with pytest.raises(CalibrationError, match="num_resamples"):
        bootstrap_ranges(_chunks(3, identical=True), CALS, num_resamples=1)
    with pytest.raises(CalibrationError, match="lacks"):
        bootstrap_ranges(_chunks(3, identical=True), CALS, tensors=["t", "other"])
