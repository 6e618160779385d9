"""Seeded, group-whole partitions of example indices, and seeded stratified subsamples.

Pure numpy: no I/O, every random choice from the ``rng`` passed in. A *group* is what must
never straddle two splits (a movie for Rotten Tomatoes; each example alone when the data
has no groups). :func:`partition_groups` walks one seeded permutation of the groups and
hands out consecutive groups to each requested part until it holds its target count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Part", "partition_groups", "stratified_subsample", "random_subsample", "group_codes"]


@dataclass(frozen=True)
class Part:
    """One part of a partition: ``target`` examples (None: every example still left).

    ``exact``: trim the last group so the part holds exactly ``target`` examples (the
    trimmed examples are used by no part, so groups stay whole across parts).
    """

    name: str
    target: int | None
    exact: bool = False


def group_codes(groups: Sequence) -> np.ndarray:
    """Dense int64 codes 0..G-1 of ``groups`` (sorted group order): what a cluster
    bootstrap resamples."""
    _, codes = np.unique(np.asarray([str(g) for g in groups], dtype=object), return_inverse=True)
    return codes.astype(np.int64)


def partition_groups(codes: np.ndarray, parts: Sequence[Part], rng: np.random.Generator
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({part name: sorted indices}, unused indices) with no group in two parts.

    Groups are visited in one seeded order; each part takes whole groups while it holds
    fewer than its target (a target of 0 takes none). A part with ``target=None`` takes
    every group still left, so put it last. With ``exact``, the examples of its last group
    beyond the target are drawn at random (seeded) and left unused.
    """
    codes = np.asarray(codes, dtype=np.int64)
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    members = [[] for _ in range(n_groups)]
    for i, c in enumerate(codes.tolist()):
        members[c].append(i)
    order = rng.permutation(n_groups).tolist()
    pos = 0
    out: dict[str, np.ndarray] = {}
    unused: list[int] = []
    for part in parts:
        taken: list[int] = []
        while pos < len(order) and (part.target is None or len(taken) < part.target):
            taken.extend(members[order[pos]])
            pos += 1
        if part.exact and part.target is not None and len(taken) > part.target:
            last = np.asarray(taken, dtype=np.int64)
            keep = np.zeros(len(last), dtype=bool)
            keep[rng.choice(len(last), size=part.target, replace=False)] = True
            unused.extend(last[~keep].tolist())
            taken = last[keep].tolist()
        out[part.name] = np.sort(np.asarray(taken, dtype=np.int64))
    for g in order[pos:]:
        unused.extend(members[g])
    return out, np.sort(np.asarray(unused, dtype=np.int64))


def stratified_subsample(labels: np.ndarray | None, n: int, rng: np.random.Generator
                         ) -> np.ndarray:
    """Sorted indices of a seeded subsample of ``n`` examples, stratified by label.

    Each class keeps its share (largest-remainder rounding, so the counts sum to ``n``);
    within a class the examples are drawn at random. Without labels (label-free data) it
    is :func:`random_subsample`. ``n`` at or above the size keeps everything.
    """
    labels = np.asarray(labels)
    size = len(labels)
    if n >= size:
        return np.arange(size, dtype=np.int64)
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * (n / size)
    take = np.floor(quota).astype(np.int64)
    short = n - int(take.sum())
    if short:
        # largest remainders first; ties broken at random (seeded), never by class order
        rema = quota - take
        tie = rng.random(len(classes))
        order = np.lexsort((tie, -rema))
        take[order[:short]] += 1
    picked = []
    for c, k in zip(classes, take.tolist()):
        idx = np.flatnonzero(labels == c)
        if k:
            picked.append(rng.choice(idx, size=k, replace=False))
    return np.sort(np.concatenate(picked).astype(np.int64)) if picked else np.zeros(0, np.int64)


def random_subsample(size: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of a seeded random subsample of ``n`` of ``size`` examples."""
    if n >= size:
        return np.arange(size, dtype=np.int64)
    return np.sort(rng.choice(size, size=n, replace=False).astype(np.int64))
