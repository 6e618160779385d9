"""Macro-F1 non-inferiority on paired predictions (``verdict.metric=macro_f1``).

``delta = macroF1(candidate) - macroF1(FP32)`` on the same labelled examples, macro-F1 as
scikit-learn computes it over the declared classes (``F1_c = 2 TP_c / (n_c + m_c)``, ``n_c``
examples of class c, ``m_c`` predicted c; 0 when both are 0). The decision rule is the
accuracy rule (``quantkit.verdict.paired_accuracy``, rules 1, 2, 5): the envelope of two intervals,
PASS when its lower bound is above ``-margin`` (relative margins of FP32's macro-F1), FAIL
when its upper bound is below, INCONCLUSIVE otherwise and below ``min_n`` / ``min_groups``.

* **Paired bootstrap of the difference** (Efron & Tibshirani 1993, ch. 16; for F1
  differences e.g. Koehn 2004): both macro-F1s recomputed on the same resample. Without
  groups the resample is exact by cells (the (label, FP32 prediction, candidate
  prediction) triples, ``Multinomial(n, cell shares)``, as the accuracy bootstrap);
  the percentile interval. With groups, groups are resampled (``quantkit.verdict.cluster``)
  and the interval is the bootstrap-t, studentized by the cluster-robust (CR1) standard
  error of the first-order (delta-method) contributions below.
* **A score bound through the changed predictions.** Macro-F1 moves only where the two
  models predict differently. Moving one example's prediction from r to q (label y)
  changes macro-F1 to first order by ``s / n`` with
  ``s = (n / C) [2 (1[q=y] - 1[r=y]) / (n_y + m_y) + F1_r / (n_r + m_r) - F1_q / (n_q + m_q)]``
  (the trapezoid of its value on FP32's and the candidate's tables), and by at most
  ``K / n`` for any possible move (``K``: the same with ``n_c + m_c - 1``, the exact size
  of a one-example change, maximised over every label and pair of classes on both
  tables). With ``b' = sum |s| / K`` over the changes that lose and ``c' = sum s / K``
  over those that gain, ``K x`` the Tango interval of ``(c' - b') / n``
  (``quantkit.verdict.score``; Rao-Scott counts with groups) bounds the difference. As
  ``|s| / K <= 1`` the weighted counts vary no more than counts of ``K``-sized changes,
  so the bound is conservative; it keeps its width when few or no predictions changed,
  where a bootstrap has none (identical predictions: every resample gives delta 0).
  ``K`` is the largest one-example effect, so a loss concentrated in a rare class (whose
  examples move macro-F1 most) is covered before it is seen.

Simulated with these functions (``benchmarks/macro_f1_validity.py``, population macro-F1
exactly ``-margin`` below FP32's): the false-PASS rate stays within alpha + 2 SE in every
world (balanced classes, a loss in a 10% class, a loss with no other changed prediction)
and size tried, where the bootstrap interval alone passes far too often at small n: the
score bound is what holds the small and sparse cases (measured:
benchmarks/results/macro_f1_validity.md). Numerics only (numpy/scipy), no I/O; randomness
only from ``seed``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse

from quantkit.errors import DataError
from quantkit.verdict.cluster import group_weight_chunks, weighted_cr1
from quantkit.verdict.margin import Margin, margin_abs as to_margin_abs
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.power import required_test_size
from quantkit.verdict.intervals import group_stats, size_rule
from quantkit.verdict.outcome import DEFAULT_POLICY, INCONCLUSIVE, SignoffTest, status_of
from quantkit.verdict.paired import as_rng
from quantkit.verdict.score import tango_interval, tango_p_noninferiority

__all__ = ["macro_f1", "macro_f1_signoff"]

_CHUNK_ELEMENTS = 2_000_000


def macro_f1(true_count: np.ndarray, pred_count: np.ndarray, tp: np.ndarray) -> np.ndarray:
    """Macro-F1 from per-class counts (last axis = classes), scikit-learn's
    ``zero_division=0``."""
    den = true_count + pred_count
    f1 = np.divide(2.0 * tp, den, out=np.zeros(np.broadcast(tp, den).shape), where=den > 0)
    return f1.mean(axis=-1)


def _labels(y: Any, r: Any, q: Any, n_classes: int) -> tuple[np.ndarray, ...]:
    arrays = tuple(np.asarray(a) for a in (y, r, q))
    if any(a.ndim != 1 for a in arrays) or len({a.size for a in arrays}) != 1 \
            or arrays[0].size == 0:
        raise DataError("labels and both models' predictions must be non-empty 1-D arrays of "
                        "equal length", where="macro_f1_signoff",
                        value=tuple(a.shape for a in arrays),
                        fix="pass the labels and top-1 predictions of the same examples")
    out = []
    for a in arrays:
        if not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() >= n_classes:
            raise DataError("labels and predictions must be class indices 0..C-1",
                            where="macro_f1_signoff", value=(str(a.dtype), n_classes),
                            fix="pass integer class indices (argmax of the logits)")
        out.append(a.astype(np.int64))
    return tuple(out)


def _tables(y: np.ndarray, r: np.ndarray, q: np.ndarray, c: int):
    true = np.bincount(y, minlength=c).astype(np.float64)
    pr, pq = (np.bincount(a, minlength=c).astype(np.float64) for a in (r, q))
    tr = np.bincount(y[r == y], minlength=c).astype(np.float64)
    tq = np.bincount(y[q == y], minlength=c).astype(np.float64)
    return true, (pr, tr), (pq, tq)


def _slopes(true: np.ndarray, pred: np.ndarray, tp: np.ndarray, shift: float):
    """Per class: the change of F1 per true positive gained (``a``) and per prediction
    lost (``f``), first order at ``shift`` 0, the exact one-example size at ``shift`` 1."""
    den = true + pred
    d = np.maximum(den - shift, 1.0)
    f1 = np.divide(2.0 * tp, den, out=np.zeros_like(den), where=den > 0)
    a = np.where(den > 0, 2.0 / d, 0.0)
    f = np.where(den > 0, f1 / d, 0.0)
    return a, f


def _max_effect(true: np.ndarray, pred: np.ndarray, tp: np.ndarray) -> float:
    """The largest |change| of macro-F1 x C one example's prediction can make (K n / C)."""
    a, f = _slopes(true, pred, tp, 1.0)
    order = np.argsort(-f, kind="stable")
    top, second = f[order[0]], (f[order[1]] if f.size > 1 else 0.0)
    other = np.where(np.arange(f.size) == order[0], second, top)  # max f over c != y
    present = true > 0
    label_moves = float(np.max((a - f + other)[present])) if present.any() else 0.0
    return max(label_moves, float(top))


def _effects(y, r, q, n, c, true, ref_table, cand_table) -> np.ndarray:
    """Signed first-order effect ``s`` of every example (0 where predictions agree)."""
    s = np.zeros(y.size)
    moved = np.flatnonzero(r != q)
    if moved.size == 0:
        return s
    yy, rr, qq = y[moved], r[moved], q[moved]
    total = np.zeros(moved.size)
    for pred, tp in (ref_table, cand_table):
        a, f = _slopes(true, pred, tp, 0.0)
        total += a[yy] * ((qq == yy).astype(float) - (rr == yy)) + f[rr] - f[qq]
    s[moved] = total / 2.0 * n / c
    return s


def _one_hot(index: np.ndarray, weights: np.ndarray, units: int, c: int) -> sparse.csr_matrix:
    return sparse.csr_matrix((weights, (np.arange(index.size), index)), shape=(units, c))


def _unit_tables(y, r, q, c, codes: np.ndarray | None):
    """Per resampling unit (a cell without groups, a group with them) its class counts:
    (unit weights or None, true, pred_ref, tp_ref, pred_cand, tp_cand) as sparse (U, C)."""
    if codes is None:  # units = the occupied (y, r, q) cells
        key = (y * c + r) * c + q
        uniq, counts = np.unique(key, return_counts=True)
        uy, ur, uq = uniq // (c * c), (uniq // c) % c, uniq % c
        k = uniq.size
        ones = np.ones(k)
        mats = (_one_hot(uy, ones, k, c), _one_hot(ur, ones, k, c),
                _one_hot(ur, (ur == uy).astype(float), k, c), _one_hot(uq, ones, k, c),
                _one_hot(uq, (uq == uy).astype(float), k, c))
        return counts.astype(np.float64), mats
    g = int(codes.max()) + 1

    def per_group(cls: np.ndarray, w: np.ndarray) -> sparse.csr_matrix:
        return sparse.csr_matrix((w, (codes, cls)), shape=(g, c))

    ones = np.ones(y.size)
    return None, (per_group(y, ones), per_group(r, ones), per_group(r, (r == y) * 1.0),
                  per_group(q, ones), per_group(q, (q == y) * 1.0))


def _resampled_deltas(w: np.ndarray, mats) -> np.ndarray:
    true, pr, tr, pq, tq = (np.asarray(w @ m) for m in mats)
    return macro_f1(true, pq, tq) - macro_f1(true, pr, tr)


def _bootstrap(y, r, q, c, codes, g, s, *, n_boot, rng, alpha, threshold):
    """(kind, low, high, p of "delta <= threshold", p of "delta >= threshold", point)."""
    n = y.size
    weights, mats = _unit_tables(y, r, q, c, codes)
    point = float(_resampled_deltas(np.ones((1, mats[0].shape[0])) if codes is not None
                                    else weights[None, :], mats)[0])
    if codes is None:
        p = weights / n
        chunk = max(1, _CHUNK_ELEMENTS // p.size)
        parts, done = [], 0
        while done < n_boot:
            b = min(chunk, n_boot - done)
            parts.append(_resampled_deltas(rng.multinomial(n, p, size=b).astype(float), mats))
            done += b
        boots = np.concatenate(parts)
        low, high = (float(v) for v in np.quantile(boots, [alpha, 1.0 - alpha]))
        return ("iid", low, high,
                (1 + int(np.count_nonzero(boots <= threshold))) / (n_boot + 1),
                (1 + int(np.count_nonzero(boots >= threshold))) / (n_boot + 1), point)
    sums = np.bincount(codes, weights=s, minlength=g)  # delta ~ mean(s), first order
    sizes = np.bincount(codes, minlength=g).astype(np.float64)
    se = float(weighted_cr1(np.ones((1, g)), sums, sizes, g)[1][0])
    ts = []
    for w in group_weight_chunks(g, n_boot, rng):
        _, se_b = weighted_cr1(w, sums, sizes, g)
        diff = _resampled_deltas(w, mats) - point
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se_b > 0, diff / np.where(se_b > 0, se_b, 1.0),
                         np.where(np.abs(diff) > 1e-12, np.sign(diff) * 1e6, 0.0))
        ts.append(np.clip(t, -1e6, 1e6))
    t = np.concatenate(ts)
    if se <= 0.0:
        hit = point > threshold
        return "cluster_t", point, point, 0.0 if hit else 1.0, 1.0 if hit else 0.0, point
    q_low, q_high = (float(v) for v in np.quantile(t, [alpha, 1.0 - alpha]))
    t_obs = (point - threshold) / se
    return ("cluster_t", point - q_high * se, point - q_low * se,
            (1 + int(np.count_nonzero(t >= t_obs))) / (n_boot + 1),
            (1 + int(np.count_nonzero(t <= t_obs))) / (n_boot + 1), point)


def macro_f1_signoff(y_true: Any, pred_ref: Any, pred_cand: Any, *, n_classes: int,
                     margin: Margin, groups: Any = None, policy: TestPolicy = DEFAULT_POLICY,
                     candidate: str = "") -> SignoffTest:
    """Non-inferiority of the candidate's macro-F1 (module docstring).

    ``y_true``, ``pred_ref``, ``pred_cand``: class indices 0..``n_classes``-1 of the same
    examples; ``groups``: one group key per example or None.
    """
    alpha, power, min_n, n_boot = policy.alpha, policy.power, policy.min_n, policy.n_boot
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) \
            or n_classes < 2:
        raise DataError("macro-F1 needs at least 2 classes", where="macro_f1_signoff",
                        value=n_classes, fix="pass the number of declared classes")
    c = int(n_classes)
    y, r, q = _labels(y_true, pred_ref, pred_cand, c)
    n = int(y.size)
    true, ref_table, cand_table = _tables(y, r, q, c)
    ref_f1 = float(macro_f1(true, ref_table[0], ref_table[1]))
    cand_f1 = float(macro_f1(true, cand_table[0], cand_table[1]))
    m = to_margin_abs(margin, ref_f1)
    k_scale = max(_max_effect(true, *ref_table), _max_effect(true, *cand_table)) * n / c
    s = _effects(y, r, q, n, c, true, ref_table, cand_table)
    u = np.clip(s / k_scale, -1.0, 1.0) if k_scale > 0 else s
    codes, g, gstats = group_stats(groups, u, "macro_f1_signoff(groups)")
    deff = gstats.design_effect if gstats else 1.0
    b_w, c_w = float(-u[u < 0].sum()), float(u[u > 0].sum())
    s_low, s_high = (k_scale * v for v in
                     tango_interval(b_w / deff, c_w / deff, n / deff, alpha=2 * alpha))
    d0 = max(-m / k_scale, -1.0 + 1e-9) if k_scale > 0 else -1.0 + 1e-9
    s_p_ni = tango_p_noninferiority(b_w / deff, c_w / deff, n / deff, d0)
    kind, b_low, b_high, b_p_ni, b_p_reg, point = _bootstrap(
        y, r, q, c, codes, g, s, n_boot=n_boot, rng=as_rng(policy.seed), alpha=alpha, threshold=-m)
    low, high = min(s_low, b_low), max(s_high, b_high)
    status = status_of(low, high, -m)

    changed = int(np.count_nonzero(r != q))
    b_acc = int(np.count_nonzero((r == y) & (q != y)))
    c_acc = int(np.count_nonzero((r != y) & (q == y)))
    level = 100 * (1 - 2 * alpha)
    score_name = "Tango score bound" + (f" (Rao-Scott, deff {deff:.2f})" if gstats else "")
    reasons = [f"macro-F1 delta {point:+.4f} [{level:g}% CI {low:+.4f}, {high:+.4f}] vs "
               f"-margin {-m:+.4f} ({margin.describe(ref_f1, 'macro-F1')}); the wider of the "
               f"{'cluster bootstrap-t' if kind == 'cluster_t' else 'paired iid bootstrap'} "
               f"[{b_low:+.4f}, {b_high:+.4f}] and a {score_name} on the changed predictions "
               f"weighted by their macro-F1 effect (at most {k_scale / n:.3g} per example) "
               f"[{s_low:+.4f}, {s_high:+.4f}]; one-sided alpha {alpha:g}",
               f"reference macro-F1 {ref_f1:.4f}, candidate {cand_f1:.4f} on n={n} "
               f"({c} classes); {changed} predictions changed (reference-only right {b_acc}, "
               f"candidate-only right {c_acc})"]
    status = size_rule(status, reasons, n=n, g=g, gstats=gstats, policy=policy,
                       correlated="the weighted changes")
    w_flip = (b_w + c_w) / n
    plan_n = None
    if status == INCONCLUSIVE and k_scale > 0:
        effect = min(point, 0.0)
        plan_n = required_test_size(flip_rate=w_flip, delta=max(effect / k_scale, -w_flip),
                                    margin_abs=m / k_scale, alpha=alpha, power=power,
                                    design_effect=deff, min_n=min_n)
        reasons.append(
            f"a new declared plan would need about {plan_n} test examples for "
            f"{100 * power:g}% power at delta {effect:+.4f}" if plan_n is not None
            else f"the observed delta {point:+.4f} is at or below -margin: no test size "
                 f"would give a PASS power at this effect")
    methods = {"score": {"method": "tango_weighted" + ("_rao_scott" if gstats else ""),
                         "low": s_low, "high": s_high, "p_noninferiority": s_p_ni,
                         "p_regression": 1.0 - s_p_ni, "scale": k_scale,
                         "weighted_flip_rate": w_flip, "weighted_b": b_w, "weighted_c": c_w},
               "bootstrap": {"method": kind, "low": b_low, "high": b_high, "n_boot": n_boot,
                             "p_noninferiority": b_p_ni, "p_regression": b_p_reg}}
    return SignoffTest(candidate=candidate, metric="macro_f1", status=status, point=point,
                       low=low, high=high, alpha=alpha, threshold=-m,
                       p_noninferiority=max(s_p_ni, b_p_ni),
                       p_regression=max(1.0 - s_p_ni, b_p_reg), n=n, ref_value=ref_f1,
                       cand_value=cand_f1, flip_rate=changed / n,
                       discordant={"b": b_acc, "c": c_acc, "changed": changed},
                       methods=methods, groups=gstats.to_dict() if gstats else None,
                       reasons=reasons, margin={**margin.to_dict(), "abs": m}, plan_n=plan_n)
