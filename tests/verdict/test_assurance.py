"""Assurance (quantkit/verdict/assurance.py) against a simulation of the model it states."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from quantkit.verdict.assurance import assurance


def _simulated(d, s_dev, s_test, threshold, alpha, draws=400_000, seed=0):
    """The normal model by simulation: true effect ~ N(d, s_dev^2), test estimate ~
    N(effect, s_test^2), PASS when estimate - z s_test > threshold."""
    rng = np.random.default_rng(seed)
    effect = rng.normal(d, s_dev, draws)
    est = rng.normal(effect, s_test)
    return float(np.mean(est - norm.ppf(1 - alpha) * s_test > threshold))


@pytest.mark.parametrize("point,half,n_dev,n_test", [
    (-0.001, 0.0055, 2500, 10000), (-0.003, 0.004, 5000, 10000), (0.0, 0.002, 3000, 6000)])
def test_matches_the_simulated_normal_model(point, half, n_dev, n_test):
    s_dev = half / norm.ppf(0.975)
    s_test = s_dev * np.sqrt(n_dev / n_test)
    got = assurance(metric="accuracy", point=point, low=point - half, high=point + half,
                    level_alpha=0.025, threshold=-0.0044, n_dev=n_dev, n_test=n_test,
                    test_alpha=0.0225)
    assert got == pytest.approx(_simulated(point, s_dev, s_test, -0.0044, 0.0225), abs=0.005)


def test_a_noisier_dev_estimate_promises_less_and_a_delta_is_capped_at_zero():
    common = dict(metric="accuracy", level_alpha=0.025, threshold=-0.0044, n_test=10000,
                  test_alpha=0.0225)
    # MobileNetV2's 10-Conv set on a 2,500-image half: +0.04 pp [-0.41, +0.49]
    half = assurance(point=0.0004, low=-0.0041, high=0.0049, n_dev=2500, **common)
    whole = assurance(point=0.0004, low=-0.0028, high=0.0036, n_dev=5000, **common)
    assert half < whole < 1.0 and half < 0.8
    # a positive dev delta plans as 0: the same as a delta of exactly 0 with that interval
    assert half == pytest.approx(assurance(point=0.0, low=-0.0045, high=0.0045, n_dev=2500,
                                           **common), rel=1e-12)
    # agreement is a share, not a delta: its point is used as it is
    share = assurance(metric="agreement", point=0.995, low=0.993, high=0.997, n_dev=5000,
                      level_alpha=0.025, threshold=0.98, n_test=10000, test_alpha=0.0225)
    assert share > 0.99


def test_degenerate_inputs():
    kw = dict(metric="agreement", level_alpha=0.025, threshold=0.98, test_alpha=0.0225)
    assert assurance(point=0.99, low=0.99, high=0.99, n_dev=100, n_test=100, **kw) == 1.0
    assert assurance(point=0.97, low=0.97, high=0.97, n_dev=100, n_test=100, **kw) == 0.0
    assert assurance(point=0.99, low=0.98, high=1.0, n_dev=0, n_test=100, **kw) == 0.0
