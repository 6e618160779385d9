"""Grouped (clustered) paired data: the cluster bootstrap and the intra-group correlation.

When examples come in groups (reviews of the same movie, frames of the same video), the
paired differences ``d_i`` of one group are correlated: a candidate that breaks on one movie
breaks on most of its reviews. Resampling examples as if independent then makes the
interval too narrow. Here the *groups* are resampled:

* :func:`cluster_bootstrap_means`: ``G`` groups drawn with replacement (group counts
  ``w ~ Multinomial(G, 1/G)``, the same distribution as drawing group indices), the
  resampled mean is the ratio ``sum_g w_g S_g / sum_g w_g n_g`` with ``S_g`` the group's sum
  of ``d`` and ``n_g`` its size.
* :func:`intra_group_correlation`: the one-way ANOVA estimator of the intra-class
  correlation of ``d`` (Donner 1986), with ``n0 = (N - sum n_g^2 / N) / (G - 1)``::

      ICC = (MSB - MSW) / (MSB + (n0 - 1) MSW)

  and Kish's design effect of a mean, ``deff = 1 + (sum n_g^2 / N - 1) ICC``: the factor by
  which grouping inflates its variance (``N / deff`` is the effective number of independent
  examples). ``ICC`` is 0 when ``d`` has no variance or every group has one example.

Numerics only (numpy), randomness only from the ``rng`` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from quantkit.errors import DataError

__all__ = ["GroupStats", "cluster_bootstrap_means", "group_codes", "intra_group_correlation"]

_CHUNK_ELEMENTS = 2_000_000


def group_codes(groups: Any, n: int, where: str) -> tuple[np.ndarray, int]:
    """Integer group codes 0..G-1 for one key per example (any hashable keys)."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.size != n:
        raise DataError("groups must give one group key per example", where=where,
                        value=(g.shape, n), fix="pass a 1-D array of group ids (e.g. movie ids)")
    _, codes = np.unique(g, return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    return codes, int(codes.max()) + 1 if codes.size else 0


@dataclass(frozen=True)
class GroupStats:
    """Intra-group correlation of the paired difference and what it costs."""

    n_groups: int
    mean_group_size: float
    icc: float
    design_effect: float  # >= 1 as used for intervals (raw deff may be below 1)

    def to_dict(self) -> dict[str, float | int]:
        return {"n_groups": self.n_groups, "mean_group_size": self.mean_group_size,
                "icc": self.icc, "design_effect": self.design_effect}


def intra_group_correlation(values: Any, codes: np.ndarray, n_groups: int) -> GroupStats:
    """ANOVA ICC of ``values`` over groups and the design effect (module docstring)."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    sizes = np.bincount(codes, minlength=n_groups).astype(np.float64)
    sums = np.bincount(codes, weights=y, minlength=n_groups)
    mean_size = n / n_groups
    weighted_size = float(np.sum(sizes ** 2) / n)
    if n_groups < 2 or n <= n_groups:
        return GroupStats(n_groups, float(mean_size), 0.0, 1.0)
    grand = y.mean()
    group_means = sums / sizes
    ssb = float(np.sum(sizes * (group_means - grand) ** 2))
    ssw = float(np.sum((y - group_means[codes]) ** 2))
    msb = ssb / (n_groups - 1)
    msw = ssw / (n - n_groups)
    n0 = (n - float(np.sum(sizes ** 2)) / n) / (n_groups - 1)
    den = msb + (n0 - 1.0) * msw
    icc = 0.0 if den <= 0.0 else (msb - msw) / den
    icc = float(min(max(icc, -1.0), 1.0))
    deff = 1.0 + (weighted_size - 1.0) * icc
    return GroupStats(n_groups, float(mean_size), icc, float(max(1.0, deff)))


def cluster_bootstrap_means(values: Any, codes: np.ndarray, n_groups: int, *, n_boot: int,
                            rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Observed mean of ``values`` and ``n_boot`` cluster-bootstrap means (ratio estimator)."""
    y = np.asarray(values, dtype=np.float64)
    if n_groups < 1:
        raise DataError("no groups to resample", where="cluster_bootstrap_means", value=0,
                        fix="pass at least one example")
    sums = np.bincount(codes, weights=y, minlength=n_groups)
    sizes = np.bincount(codes, minlength=n_groups).astype(np.float64)
    p = np.full(n_groups, 1.0 / n_groups)
    chunk = max(1, _CHUNK_ELEMENTS // n_groups)
    parts = []
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        w = rng.multinomial(n_groups, p, size=b).astype(np.float64)
        parts.append((w @ sums) / (w @ sizes))
        done += b
    return float(y.mean()), np.concatenate(parts)
