"""The accuracy sign-off test (rules 1, 2, 5 below; the other rules' tests live in
:mod:`quantkit.verdict.share_tests` and :mod:`quantkit.verdict.macro_f1`, their outcome type in
:mod:`quantkit.verdict.outcome`). One candidate's sign-off test on one split: an interval
honest for few discordant pairs, grouped data, churn, and the label-free metrics.

Rules (one-sided ``alpha``, default 0.025; the reported interval is two-sided 1 - 2 alpha):

1. Accuracy (:func:`paired_signoff`): ``delta = acc(cand) - acc(ref)`` on the same examples,
   margin ``m`` (``Margin``; relative margins use the reference accuracy). Two intervals:

   * the Tango score interval (``quantkit.verdict.score``) on the discordant counts; with
     groups, on the Rao-Scott counts ``b / deff, c / deff, n / deff`` (``deff`` the design
     effect of the paired difference, ``quantkit.verdict.cluster``);
   * the bootstrap: the percentile bootstrap over examples without groups, the studentized
     cluster bootstrap (bootstrap-t over groups, ``cluster_bootstrap_t``) with them.

   The decision interval is their envelope (lower of the lows, higher of the highs) and the
   one-sided p-values the larger of the two: the verdict rests on the more cautious method.
   PASS if ``low > -m``, FAIL if ``high < -m``, else INCONCLUSIVE.
   Macro-F1 (``verdict.metric=macro_f1``) is the same rule on the macro-F1 difference
   (``quantkit.verdict.macro_f1``).
2. Too little data is INCONCLUSIVE whatever the interval says: fewer than ``min_n``
   examples, or, with groups, fewer than ``min_groups`` groups (:data:`MIN_GROUPS`).
3. Agreement (:func:`agreement_signoff`, ``verdict.metric=agreement``, no labels):
   top-1 agreement with the reference against a declared minimum ``a0``: Wilson score
   interval (Rao-Scott with groups) and the bootstrap, enveloped; PASS if ``low > a0``,
   FAIL if ``high < a0``.
3b. A continuous per-example score vs FP32 (:func:`score_signoff`): cosine and recall@k of
   FP32's neighbours in a fixed gallery (embeddings; a per-example floor), KL and mean
   |logit delta| (logits; a per-example ceiling). The tested quantity is the share of
   examples within the tolerance, against the declared minimum share
   ``1 - verdict.score_quantile`` (default 0.95): the exact Clopper-Pearson bound (on the
   Rao-Scott counts with groups) enveloped with the bootstrap. Valid for any distribution
   of the scores at every n; never of zero width (``quantkit.verdict.score``).
4. Churn (:func:`churn_gate`): the same agreement test with ``a0 = 1 - max_flip_rate``.
   :func:`with_gate` joins a metric test and the gate as an intersection-union test: PASS
   only if both PASS, FAIL if either FAILs, else INCONCLUSIVE; its p-value is the larger
   one, so the joint claim keeps level alpha without splitting it.
5. An INCONCLUSIVE carries ``plan_n``: the test size a new declared plan would need for
   ``power`` (default 0.8) at ``min(observed delta, 0)`` (``quantkit.verdict.power``).

Every test takes its knobs (alpha, ``n_boot``, ``seed``, ``min_n``, ``min_groups``,
``power``) as one :class:`~quantkit.verdict.policy.TestPolicy`.

Numerics only (numpy/scipy), no I/O; randomness only from the policy's ``seed``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.margin import Margin, margin_abs as to_margin_abs
from quantkit.verdict.outcome import DEFAULT_POLICY, INCONCLUSIVE, SignoffTest, status_of
from quantkit.verdict.paired import as_rng
from quantkit.verdict.intervals import bootstrap_bounds, group_stats, size_rule
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.power import required_test_size
from quantkit.verdict.score import tango_interval, tango_p_noninferiority

__all__ = ["correctness_pair", "paired_signoff"]


def correctness_pair(correct_ref: Any, correct_cand: Any, margin: Any, *, where: str
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Checked per-example correctness of the same examples (1-D bool, equal length) and a
    :class:`Margin`: one clear error otherwise."""
    if not isinstance(margin, Margin):
        raise ConfigError("margin must be a quantkit.verdict.Margin", where="verdict.margin",
                          value=margin, fix="pass Margin('relative', 0.01)")
    r = np.asarray(correct_ref, dtype=bool)
    c = np.asarray(correct_cand, dtype=bool)
    if r.ndim != 1 or r.shape != c.shape or r.size == 0:
        raise DataError("correctness vectors must be non-empty, 1-D and of equal length",
                        where=where, value=(r.shape, c.shape),
                        fix="pass per-example correctness of the same examples")
    return r, c


def paired_signoff(correct_ref: Any, correct_cand: Any, *, margin: Margin, groups: Any = None,
                   policy: TestPolicy = DEFAULT_POLICY, candidate: str = "") -> SignoffTest:
    """Non-inferiority of the candidate's accuracy (module docstring, rules 1, 2, 5).

    ``correct_ref`` / ``correct_cand``: per-example correctness of the same examples;
    ``groups``: one group key per example (e.g. movie id) or None.
    """
    alpha, power, min_n = policy.alpha, policy.power, policy.min_n
    r, c = correctness_pair(correct_ref, correct_cand, margin, where="paired_signoff")
    n = int(r.size)
    b = int(np.count_nonzero(r & ~c))
    cc = int(np.count_nonzero(~r & c))
    ref_acc, cand_acc = float(r.mean()), float(c.mean())
    m = to_margin_abs(margin, ref_acc)
    d = c.astype(np.float64) - r.astype(np.float64)
    point = (cc - b) / n
    codes, g, gstats = group_stats(groups, d, "paired_signoff(groups)")
    deff = gstats.design_effect if gstats else 1.0

    s_low, s_high = tango_interval(b / deff, cc / deff, n / deff, alpha=2 * alpha)
    s_p_ni = tango_p_noninferiority(b / deff, cc / deff, n / deff, -m)
    s_p_reg = 1.0 - s_p_ni
    kind, b_low, b_high, b_p_ni, b_p_reg = bootstrap_bounds(
        d, codes, g, n_boot=policy.n_boot, rng=as_rng(policy.seed), alpha=alpha, threshold=-m,
        paired=(r, c))
    low, high = min(s_low, b_low), max(s_high, b_high)
    status = status_of(low, high, -m)

    level = 100 * (1 - 2 * alpha)
    score_name = "Tango score" + (f" (Rao-Scott, deff {deff:.2f})" if gstats else "")
    reasons = [f"accuracy delta {point:+.4f} [{level:g}% CI {low:+.4f}, {high:+.4f}] vs "
               f"-margin {-m:+.4f} ({margin.describe(ref_acc, 'accuracy')}); the wider of "
               f"{score_name} [{s_low:+.4f}, {s_high:+.4f}] and {kind} bootstrap "
               f"[{b_low:+.4f}, {b_high:+.4f}]; one-sided alpha {alpha:g}",
               f"reference accuracy {ref_acc:.4f}, candidate {cand_acc:.4f} on n={n}; "
               f"discordant: reference-only {b}, candidate-only {cc} "
               f"(flip rate {(b + cc) / n:.4f})"]
    status = size_rule(status, reasons, n=n, g=g, gstats=gstats, policy=policy,
                       correlated="the paired difference", effective_n=True)
    plan_n = None
    if status == INCONCLUSIVE:
        plan_n = required_test_size(flip_rate=(b + cc) / n, delta=min(point, 0.0), margin_abs=m,
                                    alpha=alpha, power=power, design_effect=deff, min_n=min_n)
        reasons.append(
            f"a new declared plan would need about {plan_n} test examples for "
            f"{100 * power:g}% power at delta {min(point, 0.0):+.4f}" if plan_n is not None
            else f"the observed delta {point:+.4f} is at or below -margin: no test size "
                 f"would give a PASS power at this effect")
    methods = {"score": {"method": "tango" + ("_rao_scott" if gstats else ""), "low": s_low,
                         "high": s_high, "p_noninferiority": s_p_ni, "p_regression": s_p_reg},
               "bootstrap": {"method": kind, "low": b_low, "high": b_high,
                             "n_boot": policy.n_boot, "p_noninferiority": b_p_ni,
                             "p_regression": b_p_reg}}
    return SignoffTest(candidate=candidate, metric="accuracy", status=status, point=point,
                       low=low, high=high, alpha=alpha, threshold=-m,
                       p_noninferiority=max(s_p_ni, b_p_ni), p_regression=max(s_p_reg, b_p_reg),
                       n=n, ref_value=ref_acc, cand_value=cand_acc, flip_rate=(b + cc) / n,
                       discordant={"b": b, "c": cc}, methods=methods,
                       groups=gstats.to_dict() if gstats else None, reasons=reasons,
                       margin={**margin.to_dict(), "abs": m}, plan_n=plan_n)
