"""The interval machinery the sign-off tests share: the groups of grouped data, the
bootstrap bounds (iid percentile or studentized cluster) and the too-little-data rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from quantkit.verdict.cluster import (GroupStats, cluster_bootstrap_t, group_codes,
                                      intra_group_correlation)
from quantkit.verdict.outcome import INCONCLUSIVE
from quantkit.verdict.paired import accuracy_deltas
from quantkit.verdict.policy import TestPolicy

__all__ = ["group_stats", "bootstrap_bounds", "too_small", "size_rule"]


def group_stats(groups: Any, values: np.ndarray, where: str
                ) -> tuple[np.ndarray | None, int, GroupStats | None]:
    if groups is None:
        return None, 0, None
    codes, g = group_codes(groups, values.size, where)
    return codes, g, intra_group_correlation(values, codes, g)


def bootstrap_bounds(values: np.ndarray, codes: np.ndarray | None, g: int, *, n_boot: int,
                      rng: np.random.Generator, alpha: float, threshold: float,
                      paired: tuple[np.ndarray, np.ndarray] | None
                      ) -> tuple[str, float, float, float, float]:
    """(kind, low, high, p of "mean <= threshold", p of "mean >= threshold") of the mean of
    ``values``: with groups the studentized cluster bootstrap (``cluster_t``), else the iid
    percentile bootstrap (exact by cells)."""
    if codes is not None:
        ct = cluster_bootstrap_t(values, codes, g, n_boot=n_boot, rng=rng)
        low, high = ct.bounds(alpha)
        return "cluster_t", low, high, ct.p_above(threshold), ct.p_below(threshold)
    if paired is not None:
        boots = accuracy_deltas(paired[0], paired[1], n_boot=n_boot, rng=rng)[1]
    else:
        n = values.size
        boots = rng.binomial(n, float(values.mean()), size=n_boot) / n
    low, high = (float(v) for v in np.quantile(boots, [alpha, 1.0 - alpha]))
    return ("iid", low, high, (1 + int(np.count_nonzero(boots <= threshold))) / (n_boot + 1),
            (1 + int(np.count_nonzero(boots >= threshold))) / (n_boot + 1))


def too_small(n: int, g: int, has_groups: bool, policy: TestPolicy) -> str | None:
    min_n, min_groups = policy.min_n, policy.min_groups
    if n < min_n:
        return (f"only {n} examples, below verdict.min_n={min_n}: too few to sign off, "
                f"whatever the interval")
    if has_groups and g < min_groups:
        return (f"only {g} groups, below verdict.min_groups={min_groups}: group-level "
                f"variation cannot be estimated")
    return None


def size_rule(status: str, reasons: list[str], *, n: int, g: int, gstats: GroupStats | None,
              policy: TestPolicy, correlated: str, effective_n: bool = False) -> str:
    """The status after the groups' reason and the too-little-data rule (rule 2): appends to
    ``reasons`` the groups' intra-group correlation of ``correlated`` (with grouped data) and
    why the data is too small (then INCONCLUSIVE whatever the interval said)."""
    if gstats:
        deff = gstats.design_effect
        reasons.append(f"{g} groups, intra-group correlation of {correlated} "
                       f"{gstats.icc:.3f}, design effect {deff:.2f}"
                       + (f" (effective n {n / deff:.0f})" if effective_n else ""))
    small = too_small(n, g, gstats is not None, policy)
    if small:
        reasons.append(small)
        return INCONCLUSIVE
    return status
