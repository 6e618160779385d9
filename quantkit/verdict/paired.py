"""Paired-statistics helpers of the sign-off: seeds, Holm's step-down, the accuracy bootstrap.

Every comparison is paired: example i goes through both the reference and the candidate,
and a bootstrap resample draws the *same* example indices for both. The delta is always
``candidate - reference`` (negative = the candidate is worse).

The accuracy bootstrap is exact by cells: accuracy depends on the data only through how
many examples have per-example difference ``d_i = correct_cand_i - correct_ref_i`` in
{-1, 0, +1}; resampling n example indices uniformly with replacement gives those counts ~
Multinomial(n, cell frequencies), so 2,000 resamples cost one ``multinomial`` call (the
same distribution as the index bootstrap, not an approximation).

Numerics only: numpy/scipy, no I/O; randomness only from the ``seed`` / ``rng`` passed in.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from quantkit.errors import ConfigError

__all__ = ["Seed", "accuracy_deltas", "as_rng", "holm_adjust"]

Seed = int | np.random.Generator | np.random.SeedSequence | None


def as_rng(seed: Seed) -> np.random.Generator:
    """A Generator from an int seed, a SeedSequence, or a Generator (used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise ConfigError("a seed is required (results must be reproducible)",
                          where="verdict.seed", value=None, fix="pass seed=0 or a Generator")
    return np.random.default_rng(seed)


def holm_adjust(p_values: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control), in input order.

    Sorted ascending p_(1..m): ``adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``.
    Rejecting every hypothesis with ``adj < alpha`` controls the family-wise error at alpha.
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def accuracy_deltas(correct_ref: Any, correct_cand: Any, *, n_boot: int,
                    rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """Observed accuracy delta and ``n_boot`` paired-bootstrap deltas (3-cell multinomial)."""
    r = np.asarray(correct_ref, dtype=bool)
    c = np.asarray(correct_cand, dtype=bool)
    n = r.size
    worse = int(np.count_nonzero(r & ~c))    # d_i = -1
    better = int(np.count_nonzero(~r & c))   # d_i = +1
    counts = np.array([worse, n - worse - better, better], dtype=np.float64)
    draws = rng.multinomial(n, counts / n, size=n_boot)
    return (better - worse) / n, (draws[:, 2] - draws[:, 0]) / n
