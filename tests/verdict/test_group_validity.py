"""Grouped sign-offs (issue 24, point 5): the cluster bootstrap-t, and ``verdict.min_groups``
from benchmarks/group_validity.py's world (the loss in 10% of the groups), in small seeded
simulations; the full table is the benchmark's."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from group_validity import (MARGIN, accuracy_world, cr2_bm, cr2_bm_low,  # noqa: E402
                            few_world, wild_restricted_p)

from quantkit.verdict import TestPolicy, paired_signoff  # noqa: E402
from quantkit.verdict.cluster import cluster_bootstrap_t  # noqa: E402
from quantkit.verdict.policy import MIN_GROUPS  # noqa: E402


def _rate(g: int, sims: int, seed: int, **kw) -> float:
    rng = np.random.default_rng([seed, g])
    hits = 0
    for i in range(sims):
        ref, cand, groups = accuracy_world(g, 6000 // g, rng)
        hits += paired_signoff(ref, cand, margin=MARGIN, groups=groups,
                               policy=TestPolicy(seed=i, n_boot=500, **kw)).status == "PASS"
    return hits / sims


def test_few_groups_pass_a_concentrated_loss_so_min_groups_refuses_them():
    # 10 groups: a third of the splits draw none of the 10% bad groups and look lossless
    assert _rate(10, 200, 1, min_groups=2) > 0.1
    assert _rate(10, 50, 2) == 0.0  # the default min_groups makes them INCONCLUSIVE


def test_at_min_groups_the_false_pass_rate_holds():
    sims = 300
    rate = _rate(MIN_GROUPS, sims, 3)
    assert rate <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / sims), rate


def test_cluster_bootstrap_t_matches_the_cr1_standard_error_and_degenerates_cleanly():
    rng = np.random.default_rng(4)
    codes = np.repeat(np.arange(30), 12)
    y = rng.normal(0.0, 1.0, 30)[codes] + rng.normal(0.0, 1.0, codes.size)
    ct = cluster_bootstrap_t(y, codes, 30, n_boot=4000, rng=rng)
    sums = np.bincount(codes, weights=y)
    want = math.sqrt(30 / 29 * np.sum((sums - y.mean() * 12) ** 2)) / y.size
    assert ct.se == pytest.approx(want) and ct.mean == pytest.approx(y.mean())
    low, high = ct.bounds(0.025)
    assert low < ct.mean < high and ct.p_above(low - 1.0) < 0.01 < ct.p_above(high)
    flat = cluster_bootstrap_t(np.zeros(60), codes[:60], 5, n_boot=100, rng=rng)
    assert flat.se == 0.0 and flat.bounds(0.025) == (0.0, 0.0)
    assert flat.p_above(-0.1) == 0.0 and flat.p_above(0.1) == 1.0


# -- the loss in a few groups (issue 49, point 7): benchmarks/group_validity.py --few -------

def test_cr2_is_the_classical_variance_on_singletons_and_cr1_on_equal_groups():
    y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    mu, se, df = cr2_bm(y, np.ones(y.size))
    assert mu == pytest.approx(0.7) and df == pytest.approx(9.0)
    assert se == pytest.approx(math.sqrt(np.var(y, ddof=1) / y.size))  # s / sqrt(n)
    assert cr2_bm_low(y, np.ones(y.size)) == pytest.approx(0.7 - 2.2621571628 * se)
    sums, sizes = np.array([3.0, 1.0, 4.0, 0.0]), np.full(4, 5.0)
    mu, se, df = cr2_bm(sums, sizes)
    cr1 = math.sqrt(4 / 3 * np.sum((sums - 0.4 * sizes) ** 2)) / 20
    assert (mu, df) == (pytest.approx(0.4), pytest.approx(3.0)) and se == pytest.approx(cr1)


def test_wild_restricted_p_is_small_far_above_the_threshold_and_large_below():
    rng = np.random.default_rng(5)
    sums = rng.normal(1.0, 0.1, 40) * 10
    sizes = np.full(40, 10.0)
    assert wild_restricted_p(sums, sizes, 0.5, rng=rng, n_boot=999) == pytest.approx(1e-3)
    assert wild_restricted_p(sums, sizes, 1.5, rng=rng, n_boot=999) > 0.99


def test_a_split_that_drew_none_of_the_bad_groups_is_a_lossless_split_and_passes():
    """Why no interval can hold a loss in a few groups to alpha: with k of G groups bad a
    split draws none of them with probability (1 - k / G)^G (1.7% at 4 of 80, 4.7% at 3 of
    80), and such a split is drawn exactly as a lossless one: it PASSes as often as a lossless
    candidate does (the power), which alone puts the false PASS near alpha."""
    rng = np.random.default_rng(6)
    while True:
        ref, cand, groups, drawn = few_world(80, 75, 4, False, rng)
        if drawn == 0:
            break
    t = paired_signoff(ref, cand, margin=MARGIN, groups=groups,
                       policy=TestPolicy(seed=0, n_boot=500))
    assert t.status == "PASS", t.reasons


def test_exactly_k_bad_groups_in_the_split_stay_within_alpha():
    rng = np.random.default_rng(7)
    sims = 150
    hits = 0
    for i in range(sims):
        ref, cand, groups, drawn = few_world(80, 75, 4, True, rng)
        assert drawn == 4
        hits += paired_signoff(ref, cand, margin=MARGIN, groups=groups,
                               policy=TestPolicy(seed=i, n_boot=500)).status == "PASS"
    assert hits / sims <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / sims), hits
