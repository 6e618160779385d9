"""One candidate's sign-off test on one split: an interval honest for few discordant pairs,
grouped data, churn, and the label-free metrics.

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

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.cluster import (GroupStats, cluster_bootstrap_t, group_codes,
                                      intra_group_correlation)
from quantkit.verdict.margin import Margin, margin_abs as to_margin_abs
from quantkit.verdict.policy import MIN_GROUPS, MIN_N, TestPolicy, check_alpha_one_sided
from quantkit.verdict.power import PowerPlan, required_agreement_size, required_test_size
from quantkit.verdict.score import (clopper_pearson_interval, clopper_pearson_p_above,
                                    tango_interval, tango_p_noninferiority, wilson_interval,
                                    wilson_p_above)
from quantkit.verdict.paired import accuracy_deltas, as_rng

__all__ = ["FAIL", "INCONCLUSIVE", "MIN_GROUPS", "MIN_N", "PASS", "SCORE_METRICS", "Churn",
           "SignoffTest", "TestPolicy", "agreement_signoff", "check_alpha_one_sided", "churn",
           "churn_gate", "correctness_pair",
           "score_signoff", "paired_signoff", "plan_power", "with_gate"]

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

#: The policy of a test called without one (alpha 0.025, n_boot 2000, seed 0, min_n
#: :data:`MIN_N`, min_groups :data:`MIN_GROUPS`, power 0.8).
DEFAULT_POLICY = TestPolicy()


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


@dataclass(frozen=True)
class SignoffTest:
    """One candidate's test: status, interval, p-values and what they rest on.

    ``metric``: "accuracy" / "macro_f1" (``point`` = delta cand - ref, ``threshold`` =
    -margin), "agreement" / "churn" (``point`` = agreement with the reference,
    ``threshold`` = the minimum agreement) or a label-free score (``point`` = the share of
    examples within the per-example tolerance, ``threshold`` = the minimum share).
    ``p_noninferiority``: one-sided p of "not better than the threshold"; ``p_regression``:
    one-sided p of "not worse". ``methods``: each interval
    (score, bootstrap) with its own p-values. ``plan_n``: for INCONCLUSIVE, the size a new
    declared plan would need (None otherwise, or when no size would do).
    """

    candidate: str
    metric: str
    status: str
    point: float
    low: float
    high: float
    alpha: float
    threshold: float
    p_noninferiority: float
    p_regression: float
    n: int
    ref_value: float | None
    cand_value: float | None
    flip_rate: float
    discordant: dict[str, int]
    methods: dict[str, dict[str, Any]]
    groups: dict[str, Any] | None
    reasons: list[str]
    margin: dict[str, Any] = field(default_factory=dict)
    plan_n: int | None = None
    gate: dict[str, Any] | None = None

    @property
    def level(self) -> float:
        return 1.0 - 2.0 * self.alpha

    @property
    def design_effect(self) -> float:
        return float(self.groups["design_effect"]) if self.groups else 1.0

    def __bool__(self) -> bool:
        return self.status == PASS

    def describe(self) -> str:
        return (f"{self.point:+.4f} [{100 * self.level:g}% CI {self.low:+.4f}, "
                f"{self.high:+.4f}]" if self.metric in ("accuracy", "macro_f1") else
                f"{self.point:.4f} [{100 * self.level:g}% CI {self.low:.4f}, {self.high:.4f}]")

    def to_verdict_dict(self) -> dict[str, Any]:
        """The record's verdict dict (status, reasons, deltas[metric] with point /
        low / high / level / ref / cand, margin, n, required_n = ``plan_n``, metric, alpha
        two-sided), plus ``signoff``: :meth:`to_dict`. For the report and
        ``EvalResult.from_verdict``."""
        return _verdict_dict(self)

    def to_dict(self) -> dict[str, Any]:
        def num(x: Any) -> Any:
            return None if isinstance(x, float) and not math.isfinite(x) else x

        return {"candidate": self.candidate, "metric": self.metric, "status": self.status,
                "point": num(self.point), "low": num(self.low), "high": num(self.high),
                "level": self.level, "alpha_one_sided": self.alpha,
                "threshold": self.threshold, "p_noninferiority": self.p_noninferiority,
                "p_regression": self.p_regression, "n": self.n, "ref": self.ref_value,
                "cand": self.cand_value, "flip_rate": self.flip_rate,
                "discordant": dict(self.discordant), "methods": self.methods,
                "groups": self.groups, "reasons": list(self.reasons), "margin": self.margin,
                "plan_n": self.plan_n, "gate": self.gate}


def _verdict_dict(t: "SignoffTest") -> dict[str, Any]:
    name = t.metric
    return {"status": t.status, "reasons": list(t.reasons),
            "deltas": {name: {"point": t.point, "low": t.low, "high": t.high, "level": t.level,
                              "se": None, "ref": t.ref_value, "cand": t.cand_value}},
            "mcnemar": {"b": t.discordant.get("b"), "c": t.discordant.get("c")},
            "margin": {**t.margin, "metric": name, "threshold": t.threshold}, "n": t.n,
            "required_n": t.plan_n, "slices": [], "metric": name, "alpha": 2 * t.alpha,
            "signoff": t.to_dict()}


def _status(low: float, high: float, threshold: float) -> str:
    if low > threshold:
        return PASS
    if high < threshold:
        return FAIL
    return INCONCLUSIVE


def _groups(groups: Any, values: np.ndarray, where: str
            ) -> tuple[np.ndarray | None, int, GroupStats | None]:
    if groups is None:
        return None, 0, None
    codes, g = group_codes(groups, values.size, where)
    return codes, g, intra_group_correlation(values, codes, g)


def _bootstrap_bounds(values: np.ndarray, codes: np.ndarray | None, g: int, *, n_boot: int,
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


def _too_small(n: int, g: int, has_groups: bool, policy: TestPolicy) -> str | None:
    min_n, min_groups = policy.min_n, policy.min_groups
    if n < min_n:
        return (f"only {n} examples, below verdict.min_n={min_n}: too few to sign off, "
                f"whatever the interval")
    if has_groups and g < min_groups:
        return (f"only {g} groups, below verdict.min_groups={min_groups}: group-level "
                f"variation cannot be estimated")
    return None


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
    codes, g, gstats = _groups(groups, d, "paired_signoff(groups)")
    deff = gstats.design_effect if gstats else 1.0

    s_low, s_high = tango_interval(b / deff, cc / deff, n / deff, alpha=2 * alpha)
    s_p_ni = tango_p_noninferiority(b / deff, cc / deff, n / deff, -m)
    s_p_reg = 1.0 - s_p_ni
    kind, b_low, b_high, b_p_ni, b_p_reg = _bootstrap_bounds(
        d, codes, g, n_boot=policy.n_boot, rng=as_rng(policy.seed), alpha=alpha, threshold=-m,
        paired=(r, c))
    low, high = min(s_low, b_low), max(s_high, b_high)
    status = _status(low, high, -m)

    level = 100 * (1 - 2 * alpha)
    score_name = "Tango score" + (f" (Rao-Scott, deff {deff:.2f})" if gstats else "")
    reasons = [f"accuracy delta {point:+.4f} [{level:g}% CI {low:+.4f}, {high:+.4f}] vs "
               f"-margin {-m:+.4f} ({margin.describe(ref_acc, 'accuracy')}); the wider of "
               f"{score_name} [{s_low:+.4f}, {s_high:+.4f}] and {kind} bootstrap "
               f"[{b_low:+.4f}, {b_high:+.4f}]; one-sided alpha {alpha:g}",
               f"reference accuracy {ref_acc:.4f}, candidate {cand_acc:.4f} on n={n}; "
               f"discordant: reference-only {b}, candidate-only {cc} "
               f"(flip rate {(b + cc) / n:.4f})"]
    if gstats:
        reasons.append(f"{g} groups, intra-group correlation of the paired difference "
                       f"{gstats.icc:.3f}, design effect {deff:.2f} (effective n "
                       f"{n / deff:.0f})")
    small = _too_small(n, g, gstats is not None, policy)
    if small:
        status = INCONCLUSIVE
        reasons.append(small)
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
    codes, g, gstats = _groups(groups, values, f"{metric}(groups)")
    deff = gstats.design_effect if gstats else 1.0
    s_low, s_high, s_p_ni, s_method = _share_interval(values, threshold, exact, deff, alpha)
    kind, b_low, b_high, b_p_ni, b_p_reg = _bootstrap_bounds(
        values, codes, g, n_boot=policy.n_boot, rng=as_rng(policy.seed), alpha=alpha,
        threshold=threshold, paired=None)
    low, high = min(s_low, b_low), min(max(s_high, b_high), 1.0)
    status = _status(low, high, threshold)
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
    if gstats:
        label = "agreement" if tolerance is None else "being within the tolerance"
        reasons.append(f"{g} groups, intra-group correlation of {label} "
                       f"{gstats.icc:.3f}, design effect {deff:.2f}")
    small = _too_small(n, g, gstats is not None, policy)
    if small:
        status = INCONCLUSIVE
        reasons.append(small)
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
    is valid at every n (Bahadur & Savage 1956, Ann Math Stat 27:1115-1122). Simulated
    (``benchmarks/labelfree_validity.py``, 2,000 runs per row, CPU shared): at the bound,
    the old t + bootstrap interval of the mean passed 0.365 / 0.077 / 0.050 of skewed
    cosines (1% catastrophic) and 0.245 / 0.150 / 0.154 of lognormal (sigma 2) KLs at
    n = 100 / 500 / 1,000; this share test passed at most 0.027 in every row (cosine, KL,
    |logit delta|, recall@k; bound 0.025 + 2 SE = 0.032). It needs no assumption about
    the scores' distribution.
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
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) \
            or not 0.0 < quantile < 1.0:
        raise ConfigError("the score quantile must be in (0, 1)",
                          where="verdict.score_quantile", value=quantile,
                          fix=f"set e.g. verdict.score_quantile={DEFAULT_SCORE_QUANTILE}")
    return float(quantile)


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
    if isinstance(min_agreement, bool) or not isinstance(min_agreement, (int, float)) \
            or not 0.0 < float(min_agreement) < 1.0:
        raise ConfigError("the minimum agreement must be in (0, 1)",
                          where="verdict.min_agreement", value=min_agreement,
                          fix="set e.g. verdict.min_agreement=0.99")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "agreement_signoff"),
                           metric="agreement", min_agreement=float(min_agreement),
                           groups=groups, policy=policy, candidate=candidate)


def churn_gate(pred_ref: Any, pred_cand: Any, *, max_flip_rate: float, groups: Any = None,
               policy: TestPolicy = DEFAULT_POLICY, candidate: str = "") -> SignoffTest:
    """The churn gate: PASS if the flip rate vs FP32 is shown below ``max_flip_rate``.

    ``flip_rate`` of the result is the observed ``1 - agreement``; its interval is
    ``[1 - high, 1 - low]``. Its ``plan_n`` is sized for 80% power whatever
    ``policy.power`` (as it always was; the search plans the gate with ``verdict.power``).
    """
    if isinstance(max_flip_rate, bool) or not isinstance(max_flip_rate, (int, float)) \
            or not 0.0 < float(max_flip_rate) < 1.0:
        raise ConfigError("the maximum flip rate must be in (0, 1)",
                          where="verdict.max_flip_rate", value=max_flip_rate,
                          fix="set e.g. verdict.max_flip_rate=0.05, or null for no gate")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "churn_gate"),
                           metric="churn", min_agreement=1.0 - float(max_flip_rate),
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


def with_gate(test: SignoffTest, gate: SignoffTest | None) -> SignoffTest:
    """``test`` joined with a churn gate (intersection-union, rule 4); ``gate`` None: as is."""
    if gate is None:
        return test
    if gate.status == FAIL or test.status == FAIL:
        status = FAIL
    elif gate.status == PASS and test.status == PASS:
        status = PASS
    else:
        status = INCONCLUSIVE
    note = (f"churn gate {gate.status}: flip rate {gate.flip_rate:.4f} "
            f"[{100 * gate.level:g}% CI {1 - gate.high:.4f}, {1 - gate.low:.4f}] vs "
            f"verdict.max_flip_rate {1 - gate.threshold:.4f}")
    if status != test.status:
        note += f"; the candidate's {test.metric} status {test.status} becomes {status}"
    return replace(test, status=status,
                   p_noninferiority=max(test.p_noninferiority, gate.p_noninferiority),
                   p_regression=min(test.p_regression, gate.p_regression)
                   if status == FAIL else test.p_regression,
                   reasons=[*test.reasons, note], gate=gate.to_dict(),
                   plan_n=test.plan_n if status == INCONCLUSIVE else None)


def plan_power(test: SignoffTest, *, n_available: int | None, policy: TestPolicy | None = None,
               basis: str = "dev") -> PowerPlan:
    """The test size this candidate needs for ``policy.power``, planned from ``test`` (dev)
    at ``policy.alpha``: the level the family will test this candidate at (e.g. alpha / k
    under Holm). No policy: the defaults at the test's own one-sided alpha.
    """
    policy = DEFAULT_POLICY.at(test.alpha) if policy is None else policy
    a, power, min_n = policy.alpha, policy.power, policy.min_n
    deff = test.design_effect
    if test.metric == "accuracy":
        m = -test.threshold
        effect = min(test.point, 0.0)
        need = required_test_size(flip_rate=test.flip_rate, delta=effect, margin_abs=m, alpha=a,
                                  power=power, design_effect=deff, min_n=min_n)
        what = f"delta {effect:+.4f} (min(dev delta, 0)) against -margin {-m:+.4f}"
        margin = m
    elif test.metric == "macro_f1":  # in units of the largest one-flip change (macro_f1.py)
        m = -test.threshold
        effect = min(test.point, 0.0)
        sc = test.methods["score"]
        k, w_flip = float(sc["scale"]), float(sc["weighted_flip_rate"])
        need = required_test_size(flip_rate=w_flip, delta=max(effect / k, -w_flip),
                                  margin_abs=m / k, alpha=a, power=power, design_effect=deff,
                                  min_n=min_n)
        what = (f"macro-F1 delta {effect:+.4f} (min(dev delta, 0)) against -margin "
                f"{-m:+.4f}")
        margin = m
    else:  # agreement, churn and the label-free shares: one proportion above a minimum
        effect = test.point
        margin = test.threshold
        need = required_agreement_size(agreement=effect, min_agreement=margin, alpha=a,
                                       power=power, design_effect=deff, min_n=min_n)
        label = ("agreement" if test.metric in ("agreement", "churn") else
                 f"share of examples within the {test.metric} tolerance")
        what = f"{label} {effect:.4f} (dev) against minimum {margin:.4f}"
    if need is None:
        reason = f"{test.candidate}: no test size gives {100 * power:g}% power at {what}"
    else:
        spread = (f"flip rate {test.flip_rate:.4f}" if test.metric in
                  ("accuracy", "macro_f1", "agreement", "churn")
                  or "min_agreement" in test.margin else
                  f"share outside the tolerance {test.flip_rate:.4f}")
        reason = (f"{test.candidate}: {need} test examples give {100 * power:g}% power at "
                  f"{what}, {spread}, design effect {deff:.2f}, one-sided alpha {a:g}")
        if n_available is not None:
            reason += (f"; the test split has {n_available}: "
                       + ("large enough" if n_available >= need else "too small"))
    extra = {"gate": test.gate} if test.gate else {}
    return PowerPlan(candidate=test.candidate, basis=basis, n_required=need,
                     n_available=n_available, power=power, alpha=a, metric=test.metric,
                     planned_effect=effect, margin=margin, flip_rate=test.flip_rate,
                     design_effect=deff, reason=reason, extra=extra)
