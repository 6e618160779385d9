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

from group_validity import MARGIN, accuracy_world  # noqa: E402

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
