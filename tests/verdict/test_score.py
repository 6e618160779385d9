"""Score intervals for paired and single proportions (quantkit.verdict.score)."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from quantkit.errors import DataError
from quantkit.verdict.score import (newcombe_interval, tango_interval, tango_p_noninferiority,
                                    tango_statistic, wilson_interval, wilson_p_above)


def test_newcombe_method_10_matches_the_published_example():
    """Cavo et al. 2012 table (59, 6 / 16, 80), as in Fagerland, Lydersen & Laake ch. 8 and
    the contingencytables R package's tests: -0.0621 (95% CI -0.1186 to -0.0046)."""
    low, high = newcombe_interval(59, 16, 6, 80, alpha=0.05)
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)


def test_tango_inverts_its_statistic_and_agrees_with_newcombe():
    z = norm.ppf(0.975)
    for b, c, n in [(16, 6, 161), (40, 20, 160), (3, 0, 50), (120, 95, 2500), (0, 7, 30)]:
        low, high = tango_interval(b, c, n, alpha=0.05)
        assert low < (c - b) / n < high
        assert tango_statistic(b, c, n, low) == pytest.approx(z, abs=1e-6)
        assert tango_statistic(b, c, n, high) == pytest.approx(-z, abs=1e-6)
        nl, nh = newcombe_interval(n - b - c, b, c, 0, alpha=0.05)
        assert abs(low - nl) < 0.025 and abs(high - nh) < 0.025, (b, c, n, low, nl, high, nh)
    # b = c = 0 reduces McNemar's z to 0 at delta0 = 0
    assert tango_statistic(0, 0, 10, 0.0) == 0.0
    assert tango_statistic(10, 10, 100, 0.0) == 0.0


def test_p_value_and_interval_make_the_same_decision():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(20, 5000))
        b, c = (int(v) for v in rng.multinomial(n, [0.03, 0.025, 0.945])[:2])
        m = float(rng.uniform(0.001, 0.05))
        low, _ = tango_interval(b, c, n, alpha=0.05)
        assert (low > -m) == (tango_p_noninferiority(b, c, n, -m) < 0.025)


def test_identical_predictions_on_few_examples_give_a_wide_interval():
    low, high = tango_interval(0, 0, 10, alpha=0.05)
    assert low < -0.25 and high > 0.25
    low, high = tango_interval(0, 0, 10_000, alpha=0.05)
    assert -0.001 < low < 0 < high < 0.001


def test_tango_coverage_is_close_to_nominal():
    rng = np.random.default_rng(4)
    n, p_b, p_c, sims = 400, 0.04, 0.025, 4000
    counts = rng.multinomial(n, [p_b, p_c, 1 - p_b - p_c], size=sims)
    covered = 0
    for b, c, _ in counts:
        low, high = tango_interval(b, c, n, alpha=0.05)
        covered += low <= p_c - p_b <= high
    assert 0.935 <= covered / sims <= 0.965, covered / sims


def test_wilson_interval_and_test():
    low, high = wilson_interval(0, 10, alpha=0.05)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)  # (z^2/n)/(1 + z^2/n)
    low, high = wilson_interval(95, 100, alpha=0.05)
    assert low == pytest.approx(0.8883, abs=1e-4) and high == pytest.approx(0.9785, abs=1e-4)
    assert (low > 0.9) == (wilson_p_above(95, 100, 0.9) < 0.025)
    assert wilson_p_above(950, 1000, 0.9) < 1e-6


def test_bad_counts_are_refused():
    with pytest.raises(DataError, match="b \\+ c <= n"):
        tango_interval(6, 6, 10, alpha=0.05)
    with pytest.raises(DataError):
        wilson_interval(11, 10, alpha=0.05)
    assert math.isfinite(tango_statistic(0.5, 0.25, 3.3, -0.01))  # Rao-Scott counts
