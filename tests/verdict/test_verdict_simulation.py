"""Operating characteristics of the verdict, by seeded simulation of paired evaluations.

Each simulated evaluation draws n examples whose (reference right?, candidate right?)
pair falls in one of four cells with fixed probabilities, so the true accuracy delta is
``p_cand_only - p_ref_only``. Decisions go through ``decide_from_correct``, the exact code
path ``ab_verdict`` uses for accuracy (asserted below), with the default n_boot=2000.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from quantkit.verdict import (
    PASS,
    Margin,
    ab_verdict,
    decide,
    decide_from_correct,
    paired_bootstrap_delta,
    required_n,
)

ALPHA = 0.05


def _correctness(rng: np.random.Generator, n: int, *, p_ref: float, p_ref_only: float,
                 p_cand_only: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired correctness; cells: both right, ref only, cand only, neither."""
    cum = np.cumsum([p_ref - p_ref_only, p_ref_only, p_cand_only])
    cell = np.searchsorted(cum, rng.random(n), side="right")
    return (cell == 0) | (cell == 1), (cell == 0) | (cell == 2)


def _pass_rate(rng: np.random.Generator, sims: int, n: int, margin: Margin, **cells) -> float:
    passes = 0
    for _ in range(sims):
        ref, cand = _correctness(rng, n, **cells)
        passes += decide_from_correct(ref, cand, margin=margin, alpha=ALPHA, seed=rng).status \
            == PASS
    return passes / sims


def _mc_bound(rate: float, sims: int) -> float:
    return rate + 3 * math.sqrt(rate * (1 - rate) / sims)


@pytest.mark.parametrize("margin", [Margin("absolute", 0.0077), Margin("relative", 0.01)],
                         ids=["absolute", "relative"])
def test_false_pass_rate_at_the_margin_is_at_most_alpha(margin):
    """True drop == margin (0.0077 = 1% of 0.77): PASS would be a false PASS."""
    sims = 2000
    rate = _pass_rate(np.random.default_rng(20240), sims, 2556, margin,
                      p_ref=0.77, p_ref_only=0.04, p_cand_only=0.04 - 0.0077)
    assert rate <= _mc_bound(ALPHA, sims), rate
    # the two-sided 95% interval makes PASS a one-sided test at alpha/2
    assert rate <= _mc_bound(ALPHA / 2, sims), rate


def test_false_pass_rate_of_the_real_ab_verdict():
    """Label-level data through ab_verdict and paired_bootstrap_delta (300 evaluations)."""
    rng = np.random.default_rng(7)
    sims, n, margin = 300, 1500, Margin("absolute", 0.0077)
    passes = 0
    for i in range(sims):
        ref_right, cand_right = _correctness(rng, n, p_ref=0.77, p_ref_only=0.04,
                                             p_cand_only=0.04 - 0.0077)
        y = rng.integers(0, 3, n)
        wrong = (y + rng.integers(1, 3, n)) % 3
        ref = np.where(ref_right, y, wrong)
        cand = np.where(cand_right, y, wrong)
        v = ab_verdict(y, ref, cand, margin=margin, alpha=ALPHA, extra_metrics=(), seed=i)
        iv = paired_bootstrap_delta(y, ref, cand, alpha=ALPHA, seed=i)
        assert v.deltas["accuracy"]["low"] == iv.low and v.status == decide(iv, 0.0077)
        passes += bool(v)
    assert passes / sims <= _mc_bound(ALPHA, sims), passes / sims


def test_pass_rate_rises_toward_one_with_n_when_there_is_no_drop():
    rng = np.random.default_rng(11)
    rates = [_pass_rate(rng, 400, n, Margin("relative", 0.01),
                        p_ref=0.8, p_ref_only=0.01, p_cand_only=0.01)
             for n in (200, 1000, 5000)]
    assert rates[0] < rates[1] - 0.1 < rates[2] - 0.2, rates
    assert rates[0] <= 0.3 and rates[2] >= 0.9, rates


def test_bootstrap_interval_covers_the_true_delta_about_95_percent():
    rng = np.random.default_rng(12)
    sims, true_delta = 1000, 0.025 - 0.03
    covered = 0
    for _ in range(sims):
        ref, cand = _correctness(rng, 1000, p_ref=0.8, p_ref_only=0.03, p_cand_only=0.025)
        iv = decide_from_correct(ref, cand, margin=Margin("relative", 0.01), seed=rng).interval
        covered += iv.low <= true_delta <= iv.high
    assert 0.92 <= covered / sims <= 0.98, covered / sims


@pytest.mark.parametrize("power, lo, hi", [(None, 0.40, 0.60), (0.8, 0.72, 0.88)])
def test_required_n_decides_with_the_documented_odds(power, lo, hi):
    """At n = required_n (true effect = observed effect) PASS happens ~50% of the time;
    with power=0.8 about 80%."""
    p_ref_only = p_cand_only = 0.02
    sd = math.sqrt(p_ref_only + p_cand_only)          # sd of d_i when the delta is 0
    m = 0.0077
    n = required_n(sd=sd, delta=0.0, margin_abs=m, alpha=ALPHA, power=power)
    z = norm.ppf(1 - ALPHA / 2) + (0.0 if power is None else norm.ppf(power))
    assert n == math.ceil((z * sd / m) ** 2)
    rate = _pass_rate(np.random.default_rng(13), 400, n, Margin("absolute", m),
                      p_ref=0.8, p_ref_only=p_ref_only, p_cand_only=p_cand_only)
    assert lo <= rate <= hi, (n, rate)
