"""quantkit.verdict statistics of the sign-off: Holm, margins, the decision rule's boundaries,
the exact cell bootstrap of the accuracy delta."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.errors import ConfigError
from quantkit.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Margin,
    TestPolicy,
    check_alpha,
    holm_adjust,
    margin_abs,
    paired_signoff,
)
from quantkit.verdict.outcome import status_of as _status
from quantkit.verdict.paired import accuracy_deltas


# --------------------------------------------------------------------------- Holm


def test_holm_adjust_by_hand():
    # sorted: .005*4 = .02, .01*3 = .03, .03*2 = .06, .04*1 = .04 -> running max .06
    got = holm_adjust([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm_adjust([0.5, 0.9]), [1.0, 1.0])
    assert holm_adjust([]).size == 0


# --------------------------------------------------------------------------- margin, decide


def test_margin_abs_and_validation():
    assert margin_abs(Margin("relative", 0.01), 0.77) == pytest.approx(0.0077)
    assert margin_abs(Margin("absolute", 0.005), 0.77) == 0.005
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="verdict.margin"):
            Margin("relative", bad)
    with pytest.raises(ConfigError, match="verdict.margin"):
        Margin("absolute", -0.001)
    with pytest.raises(ConfigError, match="verdict.margin_kind"):
        Margin("percent", 1.0)
    assert Margin("absolute", 0.0).value == 0.0
    for bad in (0.0, 1.0, -0.05, 2, float("nan")):
        with pytest.raises(ConfigError, match="verdict.alpha"):
            check_alpha(bad)
    ok = np.ones(200, dtype=bool)
    with pytest.raises(ConfigError, match="verdict.n_boot"):
        paired_signoff(ok, ok, margin=Margin("absolute", 0.01), policy=TestPolicy(n_boot=10))


def test_decision_rule_and_boundaries():
    """PASS if low > -m, FAIL if high < -m, else INCONCLUSIVE; touching -m decides nothing."""
    m = 0.0077
    assert _status(-0.0072, 0.0008, -m) == PASS
    assert _status(-0.03, -0.01, -m) == FAIL
    assert _status(-0.012, -0.004, -m) == INCONCLUSIVE
    assert _status(-m, 0.01, -m) == INCONCLUSIVE     # low == -m is not PASS
    assert _status(-0.03, -m, -m) == INCONCLUSIVE    # high == -m is not FAIL


# --------------------------------------------------------------------------- bootstrap


def test_cell_bootstrap_distribution_matches_index_bootstrap():
    """Multinomial cell counts reproduce the index bootstrap's distribution (accuracy)."""
    rng = np.random.default_rng(2)
    n = 800
    y = rng.integers(0, 3, n)
    ref = np.where(rng.random(n) < 0.8, y, rng.integers(0, 3, n))
    cand = np.where(rng.random(n) < 0.95, ref, rng.integers(0, 3, n))
    r, c = ref == y, cand == y
    point, fast = accuracy_deltas(r, c, n_boot=20000, rng=np.random.default_rng(5))
    d = c.astype(float) - r.astype(float)
    assert point == pytest.approx(d.mean(), abs=1e-15)
    idx = rng.integers(0, n, (20000, n))
    slow = d[idx].mean(axis=1)
    lo, hi = np.quantile(slow, [0.05, 0.95])
    f_lo, f_hi = np.quantile(fast, [0.05, 0.95])
    assert f_lo == pytest.approx(lo, abs=1.5e-3)
    assert f_hi == pytest.approx(hi, abs=1.5e-3)
    assert fast.std(ddof=1) == pytest.approx(slow.std(ddof=1), rel=0.03)
    _, again = accuracy_deltas(r, c, n_boot=20000, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(fast, again)
