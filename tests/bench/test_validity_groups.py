"""benchmarks/validity_groups.py: the ``few_bad_groups`` row of verdict_validity (the loss in
5% of the population's groups, 80 groups a split) through the run's own sign-off path, on
few simulations: its world holds the loss it claims, a lossless candidate is recommended
often and one that loses 3x the bound almost never."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import validity_groups as vg  # noqa: E402
import verdict_validity as vv  # noqa: E402


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    # conftest.py has already made HOME and QUANTKIT_CACHE private to this session
    return vv.Bench(tmp_path_factory.mktemp("validity-groups"))


def test_the_world_puts_the_whole_loss_in_the_bad_groups_it_drew():
    rng = np.random.default_rng(0)
    drawn, losses = [], []
    for _ in range(200):
        d, bad = vg.draw_few_bad(rng, 75, 0.02)
        right = d.ref.argmax(axis=1) == d.labels
        cand = d.cands["int8.minmax"].argmax(axis=1) == d.labels
        drawn.append(bad)
        losses.append(right.mean() - cand.mean())
        assert len(set(d.groups)) == vg.N_GROUPS and d.labels.size == 80 * 75
    assert np.mean(drawn) == pytest.approx(vg.BAD_GROUPS, abs=0.4)
    assert min(drawn) == 0  # the split is a sample of groups: some draw none of them
    assert np.mean(losses) == pytest.approx(0.02, abs=0.003)


def test_lossless_is_recommended_and_a_3x_loss_is_not(bench):
    assert vv.run_row(bench, "few_bad_groups", 12, 1, loss_factor=0.0) >= 0.5
    assert vv.run_row(bench, "few_bad_groups", 12, 1, loss_factor=3.0) <= 1 / 12
