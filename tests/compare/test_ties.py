"""Dev rankings whose ties do not depend on float noise (quantkit/compare/ties.py, used by
run/signoff.family_members and precision/sensitivity.rank)."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.compare.ties import RANK_TIE_SHARE, best_with_ties, rank_with_ties
from quantkit.errors import ConfigError
from quantkit.precision.sensitivity import rank

CALIBRATORS = ["int8.minmax", "int8.percentile", "int8.entropy", "int8.mse"]


def test_near_ties_go_to_the_earlier_candidate_on_every_host():
    """Two calibrators whose dev accuracy differs by less than the tie resolution: the
    earlier calibrator wins, and a relative 1e-6 perturbation (the size of the differences
    between CPU kernels) of every value changes nothing; a clear difference still wins."""
    base = {"int8.minmax": 0.7612, "int8.percentile": 0.7731, "int8.entropy": 0.77313,
            "int8.mse": 0.7725}
    rng = np.random.default_rng(0)
    picks = set()
    for _ in range(200):
        v = {k: x * (1 + 1e-6 * rng.choice([-1, 1])) for k, x in base.items()}
        picks.add(best_with_ties(v, order=CALIBRATORS, tolerance=0.05 * 0.02))
    assert picks == {"int8.percentile"}  # entropy is 3e-5 higher: a tie within 0.001
    assert best_with_ties(base, order=CALIBRATORS, tolerance=0.0) == "int8.entropy"
    clear = {**base, "int8.mse": 0.7800}
    assert best_with_ties(clear, order=CALIBRATORS, tolerance=0.001) == "int8.mse"
    # exact ties (equal counts of correct examples) go by the fixed order, not by name
    equal = dict.fromkeys(CALIBRATORS, 0.77)
    assert best_with_ties(equal, order=CALIBRATORS, tolerance=0.0) == "int8.minmax"
    with pytest.raises(ConfigError):
        best_with_ties({"x": float("nan")}, order=["x"], tolerance=0.0)


def test_layer_ranking_is_stable_under_float_noise():
    """Measured damage of 40 layers, many near zero and some near-tied: the ranking with
    ties is identical under relative 1e-6 perturbations; the plain sort is not."""
    rng = np.random.default_rng(1)
    names = [f"layer{i:02d}" for i in range(40)]
    big = rng.exponential(1.0, size=8)
    scores = np.concatenate([big, big[:4] * (1 + 1e-8), rng.normal(0, 1e-7, size=28)])
    base = dict(zip(names, scores.tolist()))
    ranks, plain = set(), set()
    for _ in range(50):
        v = {k: x * (1 + 1e-6 * rng.normal()) for k, x in base.items()}
        ranks.add(tuple(rank(v, order=names)))
        plain.add(tuple(sorted(v, key=lambda k: -v[k])))
    assert len(ranks) == 1 and len(plain) > 1
    ranked = next(iter(ranks))
    assert ranked[-28:] == tuple(names[12:])  # the near-zero layers keep graph order
    assert ranked.index("layer00") + 1 == ranked.index("layer08")  # a near tie: graph order


def test_rank_with_ties_groups_neighbours():
    v = {"a": 1.0, "b": 0.5, "c": 0.5 + 1e-6, "d": 0.1}
    assert rank_with_ties(v, order=["d", "b", "c", "a"], tolerance=1e-3) == ["a", "b", "c", "d"]
    assert rank_with_ties(v, order=["d", "c", "b", "a"], tolerance=1e-3) == ["a", "c", "b", "d"]
    assert rank_with_ties(v, order=["d", "b", "c", "a"], tolerance=0.0) == ["a", "c", "b", "d"]
    assert RANK_TIE_SHARE > 1e-6 * 100  # well above CPU-kernel noise
