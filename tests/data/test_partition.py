"""Group-whole seeded partitions and stratified subsamples (pure numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.data.partition import (Part, group_codes, partition_groups, random_subsample,
                                     stratified_subsample)


def codes_of(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


@pytest.mark.parametrize("seed", range(5))
def test_parts_hold_whole_groups_and_their_targets(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = rng.integers(1, 40, size=60)
    codes = rng.permutation(codes_of(sizes))  # groups scattered through the table
    parts = [Part("test", 400), Part("dev", 300), Part("calib", 64, exact=True),
             Part("train", 200, exact=True), Part("rest", None)]
    idx, unused = partition_groups(codes, parts, np.random.default_rng(seed))
    everything = np.concatenate([*idx.values(), unused])
    assert sorted(everything.tolist()) == list(range(len(codes)))  # each example once
    assert len(idx["calib"]) == 64 and len(idx["train"]) == 200
    assert 400 <= len(idx["test"]) < 400 + sizes.max()
    assert 300 <= len(idx["dev"]) < 300 + sizes.max()
    owner = {}
    for name, ix in idx.items():
        for g in set(codes[ix].tolist()):
            assert owner.setdefault(g, name) == name, f"group {g} in {owner[g]} and {name}"
    # the unused examples are only the trimmed tails of calib's and train's last groups
    assert set(codes[unused].tolist()) <= set(codes[idx["calib"]].tolist()) | set(
        codes[idx["train"]].tolist())
    again, _ = partition_groups(codes, parts, np.random.default_rng(seed))
    assert all(np.array_equal(again[k], idx[k]) for k in idx)


def test_other_seeds_give_other_partitions():
    codes = codes_of([5] * 50)
    a, _ = partition_groups(codes, [Part("test", 50), Part("rest", None)], np.random.default_rng(0))
    b, _ = partition_groups(codes, [Part("test", 50), Part("rest", None)], np.random.default_rng(1))
    assert not np.array_equal(a["test"], b["test"])


def test_zero_target_takes_nothing_and_rest_may_be_empty():
    idx, unused = partition_groups(np.arange(10), [Part("test", 0), Part("train", None),
                                                   Part("dev", None)], np.random.default_rng(0))
    assert len(idx["test"]) == 0 and len(idx["train"]) == 10 and len(idx["dev"]) == 0
    assert len(unused) == 0


def test_group_codes_are_dense():
    c = group_codes(["b", "a", "b", "c", "a"])
    assert c.tolist() == [1, 0, 1, 2, 0]


@pytest.mark.parametrize("n", [1, 7, 50, 99])
def test_stratified_subsample_keeps_the_class_shares(n):
    labels = np.array([0] * 700 + [1] * 200 + [2] * 100)  # sorted by label, as a file may be
    idx = stratified_subsample(labels, n, np.random.default_rng(0))
    assert len(idx) == n and len(set(idx.tolist())) == n and np.all(np.diff(idx) > 0)
    counts = np.bincount(labels[idx], minlength=3)
    assert np.all(np.abs(counts - n * np.array([0.7, 0.2, 0.1])) < 1)
    other = stratified_subsample(labels, n, np.random.default_rng(1))
    assert n < 5 or not np.array_equal(idx, other)


def test_stratified_subsample_keeps_everything_at_or_above_the_size():
    labels = np.array([0, 1, 1])
    assert stratified_subsample(labels, 3, np.random.default_rng(0)).tolist() == [0, 1, 2]
    assert random_subsample(3, 10, np.random.default_rng(0)).tolist() == [0, 1, 2]
    r = random_subsample(100, 10, np.random.default_rng(0))
    assert len(r) == 10 and np.all(np.diff(r) > 0)
