"""The backend-check gate: tolerance from the margin, exact binomial bounds, a planted
numerics difference fails, numerics noise says when a CPU result does not transfer."""

import numpy as np
import pytest
from scipy.stats import binom

from quantkit.compare.numerics import flip_count, flip_rate_bounds, numerics_gate
from quantkit.errors import ConfigError

MARGIN = 0.01 * 0.768  # relative 1% of an FP32 accuracy of 0.768


def planted(n: int, rate: float, seed: int = 0):
    """Predictions of an execution and a copy with ``rate`` of them flipped (the planted
    numerics difference)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = a.copy()
    idx = rng.choice(n, int(round(rate * n)), replace=False)
    b[idx] = 1 - b[idx]
    return a, b


def test_planted_numerics_difference_fails():
    a, b = planted(2559, 0.038)  # the measured fused-vs-exact disagreement on bert_int8
    g = numerics_gate(flip_count(a, b) / len(a), len(a), MARGIN)
    assert g.status == "fail" and not g and g.tensorrt_required
    assert g.flips == 97 and g.flip_rate_lower > g.tolerance
    # the old rule (agreement >= 0.9) would have passed it
    assert 1 - g.flip_rate >= 0.9


def test_equivalent_executions_pass():
    a, b = planted(2559, 0.0)
    g = numerics_gate(flip_count(a, b) / len(a), len(a), MARGIN, noise_flip_rate=0.0)
    assert g.status == "pass" and g and g.transfers and not g.tensorrt_required
    assert g.tolerance == pytest.approx(0.5 * MARGIN)


def test_small_subset_is_inconclusive_with_the_size_that_decides():
    g = numerics_gate(0.0, 512, MARGIN)
    assert g.status == "inconclusive" and not g
    assert g.n_needed is not None and g.n_needed > 512
    assert numerics_gate(0.0, g.n_needed, MARGIN).status == "pass"
    assert numerics_gate(0.0, g.n_needed - 1, MARGIN).status == "inconclusive"


def test_noise_large_relative_to_margin_does_not_transfer():
    g = numerics_gate(0.0, 2559, MARGIN, noise_flip_rate=97 / 2559)
    assert g.status == "pass" and g.transfers is False and g.tensorrt_required and not g
    assert g.noise_flips == 97 and g.noise_to_margin == pytest.approx((97 / 2559) / MARGIN)
    assert any("does not transfer" in r and "TensorRT evaluation is required" in r
               for r in g.reasons)
    assert g.to_dict()["transfers"] is False


def test_clopper_pearson_bounds_cover_at_the_stated_level():
    n, p = 400, 0.02
    ks = np.arange(n + 1)
    upper = np.array([flip_rate_bounds(int(k), n)[1] for k in ks])
    lower = np.array([flip_rate_bounds(int(k), n)[0] for k in ks])
    # exact: P(upper < p) <= alpha and P(lower > p) <= alpha
    assert binom.pmf(ks[upper < p], n, p).sum() <= 0.025
    assert binom.pmf(ks[lower > p], n, p).sum() <= 0.025
    assert flip_rate_bounds(0, 100)[0] == 0.0 and flip_rate_bounds(100, 100)[1] == 1.0


@pytest.mark.parametrize("kw", [dict(flip_rate=1.5, n=10, margin_abs=0.01),
                                dict(flip_rate=0.1, n=0, margin_abs=0.01),
                                dict(flip_rate=0.1, n=10, margin_abs=0.0),
                                dict(flip_rate=0.1, n=10, margin_abs=0.01, share=0.0)])
def test_bad_inputs_raise(kw):
    with pytest.raises(ConfigError):
        numerics_gate(**kw)
    with pytest.raises(ConfigError):
        flip_count(np.zeros(3), np.zeros(4))
