"""Paired statistics for A/B verdicts: McNemar, Holm, paired bootstrap of a metric delta.

Every comparison is paired: example i goes through both the reference and the candidate,
and a bootstrap resample draws the *same* example indices for both. The delta is always
``candidate - reference`` (negative = the candidate is worse).

Fast, exact bootstrap by cells
------------------------------
Accuracy and macro-F1 depend on the data only through how many examples fall in each
distinct (y, pred_ref, pred_cand) combination (a "cell"). Resampling n example indices
uniformly with replacement gives cell counts ~ Multinomial(n, cell frequencies), so we
draw the counts directly. This is the same distribution as the index bootstrap, not an
approximation. Accuracy needs 3 cells (per-example difference d_i = correct_cand_i -
correct_ref_i in {-1, 0, +1}): 2,000 resamples cost one ``multinomial`` call. Macro-F1
turns each resample's cell counts into per-class support, predicted count and true
positives with three sparse products, ``F1_k = 2 TP_k / (support_k + predicted_k)``
(0 when both are 0, scikit-learn's ``zero_division=0``), averaged over a fixed label set.
When cells are many compared with n (large label sets), the same counts are built by
drawing indices and ``np.bincount``-ing cell ids, which is cheaper than a wide multinomial.

A callable metric ``metric(y_true, pred) -> float`` falls back to drawing indices and
calling it ``2 * n_boot`` times (slow; meant for small sets).

Numerics only: numpy/scipy, no I/O; randomness only from the ``seed`` / ``rng`` passed in.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
from scipy.stats import binom, norm

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.margin import check_alpha, check_n_boot

__all__ = [
    "Interval",
    "as_rng",
    "bootstrap_deltas",
    "holm_adjust",
    "mcnemar_exact",
    "mcnemar_table",
    "metric_value",
    "paired_bootstrap_delta",
    "percentile_interval",
    "z_two_sided",
]

Metric = str | Callable[[np.ndarray, np.ndarray], float]
Seed = int | np.random.Generator | np.random.SeedSequence | None

# Bound on the elements of one chunk of resampled counts / indices (memory, not results).
_CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class Interval:
    """A delta estimate with a two-sided ``level`` percentile-bootstrap interval.

    ``se`` is the standard deviation of the bootstrap deltas (the bootstrap standard error).
    """

    point: float
    low: float
    high: float
    level: float
    se: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"point": float(self.point), "low": float(self.low), "high": float(self.high),
                "level": float(self.level), "se": None if self.se is None else float(self.se)}

    def describe(self) -> str:
        """E.g. "-0.0031 [95% CI -0.0072, +0.0008]"."""
        return (f"{self.point:+.4f} [{100 * self.level:g}% CI "
                f"{self.low:+.4f}, {self.high:+.4f}]")


def as_rng(seed: Seed) -> np.random.Generator:
    """A Generator from an int seed, a SeedSequence, or a Generator (used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise ConfigError("a seed is required (results must be reproducible)",
                          where="verdict.seed", value=None, fix="pass seed=0 or a Generator")
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------- McNemar, Holm


def mcnemar_table(correct_ref: Any, correct_cand: Any) -> tuple[int, int, int, int]:
    """Paired 2x2 counts ``(a, b, c, d)``.

    a: both right; b: reference right, candidate wrong; c: reference wrong, candidate
    right; d: both wrong.
    """
    r = np.asarray(correct_ref, dtype=bool)
    c = np.asarray(correct_cand, dtype=bool)
    if r.shape != c.shape or r.ndim != 1:
        raise DataError("correctness vectors must be 1-D and of equal length",
                        where="mcnemar_table", value=(r.shape, c.shape),
                        fix="pass per-example correctness of the same examples")
    a = int(np.count_nonzero(r & c))
    b = int(np.count_nonzero(r & ~c))
    cc = int(np.count_nonzero(~r & c))
    d = int(r.size - a - b - cc)
    return a, b, cc, d


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value on the discordant pairs.

    Under H0 (no difference) b ~ Binomial(b + c, 1/2):
    ``p = min(1, 2 * P[X <= min(b, c)])``; ``p = 1`` when ``b + c = 0``.
    """
    for name, v in (("b", b), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise DataError(f"{name} must be a non-negative integer count",
                            where="mcnemar_exact", value=v, fix="pass discordant-pair counts")
    n = int(b) + int(c)
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(int(b), int(c)), n, 0.5)))


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


# --------------------------------------------------------------------------- inputs


def check_paired(y_true: Any, pred_ref: Any, pred_cand: Any,
                 where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    y = np.asarray(y_true)
    pr = np.asarray(pred_ref)
    pc = np.asarray(pred_cand)
    if y.ndim != 1 or pr.shape != y.shape or pc.shape != y.shape:
        raise DataError("y_true, pred_ref and pred_cand must be 1-D label arrays of equal length",
                        where=where, value=(y.shape, pr.shape, pc.shape),
                        fix="pass predicted labels (argmax of logits) for the same examples")
    if y.size == 0:
        raise DataError("no examples to compare", where=where, value=0,
                        fix="evaluate at least one example")
    return y, pr, pc


def check_metric(metric: Any) -> Metric:
    if metric in ("accuracy", "macro_f1") or callable(metric):
        return metric
    raise ConfigError("unknown metric", where="verdict.metric", value=metric,
                      fix="use 'accuracy', 'macro_f1' or a callable(y_true, pred) -> float")


def metric_name(metric: Metric) -> str:
    return metric if isinstance(metric, str) else getattr(metric, "__name__", "metric")


# --------------------------------------------------------------------------- cell machinery


def _encode(y: np.ndarray, pr: np.ndarray, pc: np.ndarray,
            labels: Sequence[Any] | None) -> tuple[list[np.ndarray], int]:
    """Integer codes 0..K-1 for the label set, K for labels outside it."""
    if labels is None:
        classes = np.unique(np.concatenate([y, pr, pc])).tolist()
    else:
        classes = list(labels)
        if not classes or len(set(classes)) != len(classes):
            raise ConfigError("labels must be a non-empty list of distinct labels",
                              where="paired_bootstrap_delta(labels)", value=labels,
                              fix="list every class once")
    k = len(classes)
    lookup = {v: i for i, v in enumerate(classes)}
    codes = []
    for a in (y, pr, pc):
        values, inverse = np.unique(a, return_inverse=True)
        value_codes = np.array([lookup.get(v, k) for v in values.tolist()], dtype=np.int64)
        codes.append(value_codes[inverse.ravel()])
    return codes, k


class _CellF1:
    """Macro-F1 of one model from per-cell counts ``W`` (resamples x cells)."""

    def __init__(self, y_code: np.ndarray, p_code: np.ndarray, k: int) -> None:
        m = y_code.size
        rows = np.arange(m)

        def one_hot(mask: np.ndarray, cols: np.ndarray) -> sp.csr_array:
            return sp.csr_array((np.ones(int(mask.sum())), (rows[mask], cols[mask])),
                                shape=(m, k))

        self.support = one_hot(y_code < k, y_code)
        self.predicted = one_hot(p_code < k, p_code)
        self.true_pos = one_hot((y_code < k) & (y_code == p_code), y_code)

    def __call__(self, w: np.ndarray) -> np.ndarray:
        den = np.asarray(w @ self.support) + np.asarray(w @ self.predicted)
        tp = np.asarray(w @ self.true_pos)
        f1 = np.divide(2.0 * tp, den, out=np.zeros_like(den), where=den > 0)
        return f1.mean(axis=1)


def _resampled_counts(cell_of_example: np.ndarray, counts: np.ndarray, n_boot: int,
                      rng: np.random.Generator):
    """Yield chunks of resampled cell counts, shape (chunk, cells); exact index bootstrap."""
    n = int(counts.sum())
    m = counts.size
    use_multinomial = 8 * m <= n or m <= 8
    width = m if use_multinomial else n
    chunk = max(1, _CHUNK_ELEMENTS // max(width, 1))
    p = counts / n
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        if use_multinomial:
            yield rng.multinomial(n, p, size=b).astype(np.float64)
        else:
            idx = rng.integers(0, n, size=(b, n))
            flat = (np.arange(b)[:, None] * m + cell_of_example[idx]).ravel()
            yield np.bincount(flat, minlength=b * m).reshape(b, m).astype(np.float64)
        done += b


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


def _macro_f1_deltas(y: np.ndarray, pr: np.ndarray, pc: np.ndarray, *, n_boot: int,
                     rng: np.random.Generator,
                     labels: Sequence[Any] | None) -> tuple[float, np.ndarray]:
    (yc, rc, cc), k = _encode(y, pr, pc, labels)
    base = k + 1
    key = (yc * base + rc) * base + cc
    cells, cell_of_example, counts = np.unique(key, return_inverse=True, return_counts=True)
    cell_cand = cells % base
    cell_ref = (cells // base) % base
    cell_y = cells // (base * base)
    f1_ref = _CellF1(cell_y, cell_ref, k)
    f1_cand = _CellF1(cell_y, cell_cand, k)
    observed = counts[None, :].astype(np.float64)
    point = float(f1_cand(observed)[0] - f1_ref(observed)[0])
    parts = [f1_cand(w) - f1_ref(w)
             for w in _resampled_counts(cell_of_example.ravel(), counts, n_boot, rng)]
    return point, np.concatenate(parts)


def metric_value(y_true: np.ndarray, pred: np.ndarray, metric: Metric, *,
                 labels: Sequence[Any] | None = None) -> float:
    """One model's metric on the full sample (same definitions as the bootstrap)."""
    if metric == "accuracy":
        return float(np.mean(y_true == pred))
    if metric == "macro_f1":
        (yc, pc, _), k = _encode(y_true, pred, pred, labels)
        key = yc * (k + 1) + pc
        cells, counts = np.unique(key, return_counts=True)
        f1 = _CellF1(cells // (k + 1), cells % (k + 1), k)
        return float(f1(counts[None, :].astype(np.float64))[0])
    return float(metric(y_true, pred))


def bootstrap_deltas(y_true: Any, pred_ref: Any, pred_cand: Any, *, metric: Metric = "accuracy",
                     n_boot: int, rng: np.random.Generator,
                     labels: Sequence[Any] | None = None) -> tuple[float, np.ndarray]:
    """Observed delta (cand - ref) and ``n_boot`` paired-bootstrap deltas of ``metric``."""
    y, pr, pc = check_paired(y_true, pred_ref, pred_cand, "bootstrap_deltas")
    metric = check_metric(metric)
    if metric == "accuracy":
        return accuracy_deltas(pr == y, pc == y, n_boot=n_boot, rng=rng)
    if metric == "macro_f1":
        return _macro_f1_deltas(y, pr, pc, n_boot=n_boot, rng=rng, labels=labels)
    n = y.size
    point = float(metric(y, pc)) - float(metric(y, pr))
    deltas = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, n, size=n)
        deltas[i] = float(metric(y[idx], pc[idx])) - float(metric(y[idx], pr[idx]))
    return point, deltas


def percentile_interval(point: float, deltas: np.ndarray, *, alpha: float) -> Interval:
    """Two-sided (1 - alpha) percentile interval: the alpha/2 and 1 - alpha/2 quantiles."""
    low, high = np.quantile(deltas, [alpha / 2.0, 1.0 - alpha / 2.0])
    se = float(np.std(deltas, ddof=1)) if deltas.size > 1 else 0.0
    return Interval(point=float(point), low=float(low), high=float(high),
                    level=1.0 - alpha, se=se)


def paired_bootstrap_delta(y_true: Any, pred_ref: Any, pred_cand: Any, *,
                           metric: Metric = "accuracy", n_boot: int = 2000,
                           alpha: float = 0.05, seed: Seed = 0,
                           labels: Sequence[Any] | None = None) -> Interval:
    """Paired percentile-bootstrap interval for ``metric(cand) - metric(ref)``.

    Each resample draws the same n example indices for both models (exactly, via cell
    counts; see the module docstring). The interval is the (alpha/2, 1 - alpha/2)
    quantiles of the resampled deltas; ``point`` is the delta on the full sample.
    ``labels`` fixes the class set macro-F1 averages over (default: every label seen in
    y_true, pred_ref or pred_cand, the same set for both models).
    """
    alpha = check_alpha(alpha)
    n_boot = check_n_boot(n_boot)
    point, deltas = bootstrap_deltas(y_true, pred_ref, pred_cand, metric=metric,
                                     n_boot=n_boot, rng=as_rng(seed), labels=labels)
    return percentile_interval(point, deltas, alpha=alpha)


def z_two_sided(alpha: float) -> float:
    """``z_{1 - alpha/2}`` of the standard normal."""
    return float(norm.ppf(1.0 - alpha / 2.0))
