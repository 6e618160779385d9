"""The label-free sign-off tests: top-1 agreement with FP32, a per-example score's share
within its tolerance (cosine, recall@k, KL, |logit delta|) and churn, all one share-above-a-
minimum test (rules 3, 3b, 4 of :mod:`quantkit.verdict.paired_accuracy`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.outcome import DEFAULT_POLICY, INCONCLUSIVE, SignoffTest, status_of
from quantkit.verdict.paired import as_rng
from quantkit.verdict.intervals import bootstrap_bounds, group_stats, size_rule
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.power import required_agreement_size
from quantkit.verdict.score import (clopper_pearson_interval, clopper_pearson_p_above,
                                    wilson_interval, wilson_p_above)

__all__ = ["SCORE_METRICS", "SCORE_WHAT", "DEFAULT_SCORE_QUANTILE", "Churn", "agreement_signoff",
           "check_score_quantile", "churn", "churn_gate", "score_signoff"]


def _agreement_test(agree: np.ndarray, *, metric: str, min_agreement: float, groups: Any,
                    policy: TestPolicy, candidate: str) -> SignoffTest:
    return _share_test(agree.astype(np.float64), metric=metric, threshold=min_agreement,
                       exact=False, groups=groups, policy=policy, candidate=candidate)


#: what each per-example score is, for the reasons (metric -> phrase)
SCORE_WHAT = {"agreement": "agreement with FP32",
              "churn": "agreement with FP32 (churn gate)",
              "cosine": "cosine to FP32",
              "recall_at_k": "recall@k of FP32's neighbours in the gallery",
              "kl": "KL(FP32 || candidate)", "abs_logit": "mean |logit - FP32 logit|"}


def _share_interval(values: np.ndarray, threshold: float, exact: bool, deff: float,
                    alpha: float) -> tuple[float, float, float, str]:
    """(low, high, one-sided p of "share <= threshold", method) of a 0/1 share on the
    (Rao-Scott) counts: Clopper-Pearson (``exact``) or Wilson score."""
    x, n = float(values.sum()), float(values.size)
    if exact:
        low, high = clopper_pearson_interval(x / deff, n / deff, alpha=2 * alpha)
        return low, high, clopper_pearson_p_above(x / deff, n / deff, threshold), \
            "clopper_pearson"
    low, high = wilson_interval(x / deff, n / deff, alpha=2 * alpha)
    return low, high, wilson_p_above(x / deff, n / deff, threshold), "wilson"


def _share_test(values: np.ndarray, *, metric: str, threshold: float, exact: bool,
                groups: Any, policy: TestPolicy, candidate: str,
                tolerance: dict[str, Any] | None = None) -> SignoffTest:
    """One implementation for every label-free test: a 0/1 ``values`` per example (agrees
    with FP32; within the per-example tolerance) whose share must be shown above
    ``threshold`` (module docstring, rules 3, 3b)."""
    alpha = policy.alpha
    n = int(values.size)
    share = float(values.mean())
    codes, g, gstats = group_stats(groups, values, f"{metric}(groups)")
    deff = gstats.design_effect if gstats else 1.0
    s_low, s_high, s_p_ni, s_method = _share_interval(values, threshold, exact, deff, alpha)
    kind, b_low, b_high, b_p_ni, b_p_reg = bootstrap_bounds(
        values, codes, g, n_boot=policy.n_boot, rng=as_rng(policy.seed), alpha=alpha,
        threshold=threshold, paired=None)
    low, high = min(s_low, b_low), min(max(s_high, b_high), 1.0)
    status = status_of(low, high, threshold)
    level = 100 * (1 - 2 * alpha)
    what = SCORE_WHAT.get(metric, metric)
    outside = n - int(round(values.sum()))
    if tolerance is None:
        head = (f"{what} {share:.4f} [{level:g}% CI {low:.4f}, {high:.4f}] vs declared minimum "
                f"{threshold:.4f} (max flip rate {1 - threshold:.4f})")
        tail = f"; {outside} of {n} predictions flipped"
        discordant = {"flipped": outside}
        margin: dict[str, Any] = {"min_agreement": threshold}
    else:
        side = ">=" if tolerance["higher_is_better"] else "<="
        head = (f"share of examples with {what} {side} {tolerance['bound']:g} (the per-example "
                f"tolerance): {share:.4f} [{level:g}% CI {low:.4f}, {high:.4f}] vs declared "
                f"minimum share {threshold:.4f} (verdict.score_quantile="
                f"{tolerance['quantile']:g}: the {tolerance['quantile']:g} quantile of {what} "
                f"{side} {tolerance['bound']:g})")
        tail = (f"; {outside} of {n} examples outside the tolerance; {what}: mean "
                f"{tolerance['score_mean']:.4g}, {tolerance['quantile']:g} quantile "
                f"{tolerance['score_at_quantile']:.4g}")
        discordant = {"outside": outside}
        margin = {"quantile": tolerance["quantile"], "bound": tolerance["bound"],
                  "min_share": threshold, "higher_is_better": tolerance["higher_is_better"],
                  "kind": "proportion", "test": "exact binomial share"}
    score_name = ("exact Clopper-Pearson" if exact else "Wilson score") + \
        (" (Rao-Scott)" if gstats else "")
    reasons = [f"{head}; the wider of {score_name} [{s_low:.4f}, {s_high:.4f}] and "
               f"{'cluster bootstrap-t' if kind == 'cluster_t' else kind + ' bootstrap'} "
               f"[{b_low:.4f}, {b_high:.4f}]; one-sided alpha {alpha:g}{tail}"]
    status = size_rule(status, reasons, n=n, g=g, gstats=gstats, policy=policy,
                       correlated="agreement" if tolerance is None
                       else "being within the tolerance")
    plan_n = None
    if status == INCONCLUSIVE:
        plan_n = required_agreement_size(agreement=share, min_agreement=threshold,
                                         alpha=alpha, power=policy.power, design_effect=deff,
                                         min_n=policy.min_n)
    facts = {} if tolerance is None else {
        "score_mean": tolerance["score_mean"],
        "score_at_quantile": tolerance["score_at_quantile"]}
    methods = {"score": {"method": s_method + ("_rao_scott" if gstats else ""), "low": s_low,
                         "high": s_high, "p_noninferiority": s_p_ni,
                         "p_regression": 1.0 - s_p_ni, **facts},
               "bootstrap": {"method": kind, "low": b_low, "high": b_high,
                             "n_boot": policy.n_boot, "p_noninferiority": b_p_ni,
                             "p_regression": b_p_reg}}
    return SignoffTest(candidate=candidate, metric=metric, status=status, point=share,
                       low=low, high=high, alpha=alpha, threshold=threshold,
                       p_noninferiority=max(s_p_ni, b_p_ni),
                       p_regression=max(1.0 - s_p_ni, b_p_reg), n=n, ref_value=None,
                       cand_value=share, flip_rate=outside / n, discordant=discordant,
                       methods=methods, groups=gstats.to_dict() if gstats else None,
                       reasons=reasons, margin=margin, plan_n=plan_n)


#: verdict.metric -> (higher is better, the settings key of its declared per-example bound)
SCORE_METRICS = {"agreement": (True, "verdict.min_agreement"),
                 "cosine": (True, "verdict.min_cosine"),
                 "recall_at_k": (True, "verdict.min_recall"),
                 "kl": (False, "verdict.max_kl"),
                 "abs_logit": (False, "verdict.max_abs_logit")}


#: verdict.score_quantile by default: at least 95% of examples within the tolerance
DEFAULT_SCORE_QUANTILE = 0.05


def score_signoff(scores: Any, *, metric: str, threshold: float,
                  quantile: float | None = DEFAULT_SCORE_QUANTILE, groups: Any = None,
                  policy: TestPolicy = DEFAULT_POLICY, candidate: str = "") -> SignoffTest:
    """Label-free non-inferiority of a per-example score vs FP32 (rules 3, 3b).

    ``metric`` names the score (:data:`SCORE_METRICS`: cosine and recall_at_k are better
    higher, kl and abs_logit lower); ``threshold`` is its per-example tolerance (a floor or
    a ceiling). PASS when the exact (Clopper-Pearson) lower bound of the share of examples
    within the tolerance is above ``1 - quantile``: "the ``quantile`` quantile of the score
    is within the tolerance". ``metric="agreement"`` takes 0/1 scores and ``threshold`` is
    the minimum agreement (Wilson, exactly :func:`agreement_signoff`; no quantile).

    Why not the mean: a mean of skewed or heavy-tailed per-example scores has no test that
    is valid at every n (Bahadur & Savage 1956, Ann Math Stat 27:1115-1122). Simulated at
    the bound (``benchmarks/labelfree_validity.py``), the old t + bootstrap interval of the
    mean passed skewed cosines and lognormal KLs far more often than alpha, while this share
    test stays within alpha + 2 SE in every row (cosine, KL, |logit delta|, recall@k;
    measured: benchmarks/results/labelfree_validity.md). It needs no assumption about the
    scores' distribution.
    """
    if metric not in SCORE_METRICS:
        raise ConfigError("not a label-free score metric", where="verdict.metric", value=metric,
                          fix=f"use one of {sorted(SCORE_METRICS)}")
    higher, key = SCORE_METRICS[metric]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not math.isfinite(threshold) or (higher and not 0.0 < threshold < 1.0) \
            or (not higher and threshold <= 0):
        raise ConfigError(f"the declared {'floor' if higher else 'ceiling'} is out of range",
                          where=key, value=threshold,
                          fix=f"set e.g. {key}={0.99 if higher else 0.01}")
    v = np.asarray(scores, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise DataError("per-example scores must be a non-empty 1-D array of finite numbers",
                        where=f"{metric} scores", value=v.shape,
                        fix="score every evaluated example against FP32")
    common = dict(groups=groups, policy=policy, candidate=candidate)
    if metric == "agreement":
        if not np.all((v == 0.0) | (v == 1.0)):
            raise DataError("agreement scores must be 0 or 1 per example", where="agreement",
                            value=sorted(set(np.unique(v).tolist()))[:5],
                            fix="pass (FP32 top-1 == candidate top-1) per example")
        return _share_test(v, metric=metric, threshold=float(threshold), exact=False,
                           **common)
    quantile = check_score_quantile(quantile, metric)
    inside = (v >= threshold) if higher else (v <= threshold)
    tolerance = {"quantile": quantile, "bound": float(threshold), "higher_is_better": higher,
                 "score_mean": float(v.mean()),
                 "score_at_quantile": float(np.quantile(v, quantile if higher
                                                        else 1.0 - quantile))}
    return _share_test(inside.astype(np.float64), metric=metric, threshold=1.0 - quantile,
                       exact=True, tolerance=tolerance, **common)


def check_score_quantile(quantile: Any, metric: str) -> float:
    """``verdict.score_quantile`` as a float in (0, 1); one ConfigError otherwise (null:
    the mean test it used to select is gone, see :func:`score_signoff`)."""
    if quantile is None:
        raise ConfigError(f"verdict.metric={metric} is tested as the share of examples within "
                          "a per-example tolerance; the test of the mean (score_quantile=null) "
                          "is gone: it is not valid for skewed or heavy-tailed scores",
                          where="verdict.score_quantile", value=None,
                          fix=f"set verdict.score_quantile={DEFAULT_SCORE_QUANTILE} (at least "
                              f"{100 * (1 - DEFAULT_SCORE_QUANTILE):g}% of examples within the "
                              "tolerance), or another share")
    return _open_unit(quantile, what="the score quantile", key="verdict.score_quantile",
                      fix=f"set e.g. verdict.score_quantile={DEFAULT_SCORE_QUANTILE}")


def _open_unit(value: Any, *, what: str, key: str, fix: str) -> float:
    """``value`` as a float strictly between 0 and 1; else one ConfigError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.0 < float(value) < 1.0:
        raise ConfigError(f"{what} must be in (0, 1)", where=key, value=value, fix=fix)
    return float(value)


def _agreement_inputs(pred_ref: Any, pred_cand: Any, where: str) -> np.ndarray:
    pr, pc = np.asarray(pred_ref), np.asarray(pred_cand)
    if pr.ndim != 1 or pr.shape != pc.shape or pr.size == 0:
        raise DataError("predictions must be non-empty 1-D label arrays of equal length",
                        where=where, value=(pr.shape, pc.shape),
                        fix="pass the top-1 predictions (argmax of logits) of the same examples")
    return pr == pc


def agreement_signoff(pred_ref: Any, pred_cand: Any, *, min_agreement: float = 0.99,
                      groups: Any = None, policy: TestPolicy = DEFAULT_POLICY,
                      candidate: str = "") -> SignoffTest:
    """Label-free non-inferiority: top-1 agreement with the reference above ``min_agreement``."""
    min_agreement = _open_unit(min_agreement, what="the minimum agreement",
                               key="verdict.min_agreement",
                               fix="set e.g. verdict.min_agreement=0.99")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "agreement_signoff"),
                           metric="agreement", min_agreement=min_agreement,
                           groups=groups, policy=policy, candidate=candidate)


def churn_gate(pred_ref: Any, pred_cand: Any, *, max_flip_rate: float, groups: Any = None,
               policy: TestPolicy = DEFAULT_POLICY, candidate: str = "") -> SignoffTest:
    """The churn gate: PASS if the flip rate vs FP32 is shown below ``max_flip_rate``.

    ``flip_rate`` of the result is the observed ``1 - agreement``; its interval is
    ``[1 - high, 1 - low]``. Its ``plan_n`` is sized for 80% power whatever
    ``policy.power`` (as it always was; the search plans the gate with ``verdict.power``).
    """
    max_flip_rate = _open_unit(max_flip_rate, what="the maximum flip rate",
                               key="verdict.max_flip_rate",
                               fix="set e.g. verdict.max_flip_rate=0.05, or null for no gate")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "churn_gate"),
                           metric="churn", min_agreement=1.0 - max_flip_rate,
                           groups=groups, policy=replace(policy, power=0.8),
                           candidate=candidate)


@dataclass(frozen=True)
class Churn:
    """Agreement with FP32's top-1 predictions and the flip rate with its interval."""

    agreement: float
    flip_rate: float
    flip_low: float
    flip_high: float
    level: float
    n: int
    flipped: int
    method: str
    groups: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {"agreement": self.agreement, "flip_rate": self.flip_rate,
                "flip_low": self.flip_low, "flip_high": self.flip_high, "level": self.level,
                "n": self.n, "flipped": self.flipped, "method": self.method,
                "groups": self.groups}


def churn(pred_ref: Any, pred_cand: Any, *, groups: Any = None,
          policy: TestPolicy = DEFAULT_POLICY) -> Churn:
    """Every candidate's churn vs FP32, gate or not: the flip rate and its two-sided
    ``1 - 2 alpha`` interval (the wider of Wilson score, Rao-Scott with groups, and the
    iid / cluster bootstrap). Only the policy's alpha, ``n_boot`` and seed apply: an
    interval, not a verdict, so no minimum size."""
    t = _agreement_test(_agreement_inputs(pred_ref, pred_cand, "churn"), metric="churn",
                        min_agreement=0.5, groups=groups,
                        policy=replace(policy, min_n=1, min_groups=2, power=0.8), candidate="")
    return Churn(agreement=t.point, flip_rate=t.flip_rate, flip_low=1.0 - t.high,
                 flip_high=1.0 - t.low, level=t.level, n=t.n,
                 flipped=int(t.discordant["flipped"]),
                 method=f"{t.methods['score']['method']} + {t.methods['bootstrap']['method']} "
                        f"bootstrap", groups=t.groups)
