"""One candidate's sign-off test on one split: an interval honest for few discordant pairs,
grouped data, churn, and the label-free agreement metric.

Rules (one-sided ``alpha``, default 0.025; the reported interval is two-sided 1 - 2 alpha):

1. Accuracy (:func:`paired_signoff`): ``delta = acc(cand) - acc(ref)`` on the same examples,
   margin ``m`` (``Margin``; relative margins use the reference accuracy). Two intervals:

   * the Tango score interval (``quantkit.verdict.score``) on the discordant counts; with
     groups, on the Rao-Scott counts ``b / deff, c / deff, n / deff`` (``deff`` the design
     effect of the paired difference, ``quantkit.verdict.cluster``);
   * the percentile bootstrap: over examples without groups, over groups (cluster
     bootstrap) with them.

   The decision interval is their envelope (lower of the lows, higher of the highs) and the
   one-sided p-values the larger of the two: the verdict rests on the more cautious method.
   PASS if ``low > -m``, FAIL if ``high < -m``, else INCONCLUSIVE.
2. Too little data is INCONCLUSIVE whatever the interval says: fewer than ``min_n``
   examples, or, with groups, fewer than ``min_groups`` groups.
3. Agreement (:func:`agreement_signoff`, ``verdict.metric=agreement``, no labels):
   top-1 agreement with the reference against a declared minimum ``a0``: Wilson score
   interval (Rao-Scott with groups) and the bootstrap, enveloped; PASS if ``low > a0``,
   FAIL if ``high < a0``.
3b. Any per-example score vs FP32 (:func:`score_signoff`; agreement is the binary case, one
   implementation): cosine and recall@k of FP32's neighbours (embeddings; a floor), KL and
   mean |logit delta| (logits; a ceiling). Binary scores: Wilson as in 3; continuous scores:
   a Student t interval of the mean (standard error inflated by the design effect with
   groups), enveloped with the iid / cluster bootstrap. PASS if the lower bound is above the
   floor (upper bound below the ceiling), FAIL if the whole interval is on the wrong side.
   ``quantile`` q tests the share of examples within the bound against ``1 - q`` instead.
4. Churn (:func:`churn_gate`): the same agreement test with ``a0 = 1 - max_flip_rate``.
   :func:`with_gate` joins a metric test and the gate as an intersection-union test: PASS
   only if both PASS, FAIL if either FAILs, else INCONCLUSIVE; its p-value is the larger
   one, so the joint claim keeps level alpha without splitting it.
5. An INCONCLUSIVE carries ``plan_n``: the test size a new declared plan would need for
   ``power`` (default 0.8) at ``min(observed delta, 0)`` (``quantkit.verdict.power``).

Numerics only (numpy/scipy), no I/O; randomness only from ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.cluster import (GroupStats, cluster_bootstrap_means, group_codes,
                                      intra_group_correlation)
from quantkit.verdict.margin import Margin, check_n_boot, margin_abs as to_margin_abs
from quantkit.verdict.power import (PowerPlan, required_agreement_size, required_score_size,
                                    required_test_size)
from quantkit.verdict.score import (tango_interval, tango_p_noninferiority, wilson_interval,
                                    wilson_p_above)
from quantkit.verdict.stats import Seed, accuracy_deltas, as_rng

__all__ = ["FAIL", "INCONCLUSIVE", "MIN_GROUPS", "MIN_N", "PASS", "SCORE_METRICS", "Churn",
           "SignoffTest", "agreement_signoff", "check_alpha_one_sided", "churn", "churn_gate",
           "correctness_pair",
           "score_signoff", "paired_signoff", "plan_power", "with_gate"]

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

#: Below this many examples a verdict is INCONCLUSIVE (verdict.min_n).
MIN_N = 100
#: With groups, below this many groups a verdict is INCONCLUSIVE (verdict.min_groups).
MIN_GROUPS = 10


def check_alpha_one_sided(alpha: Any) -> float:
    """A one-sided alpha in (0, 0.5) as float; ConfigError naming verdict.alpha otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) \
            or not 0.0 < float(alpha) < 0.5:
        raise ConfigError("the one-sided alpha must be in (0, 0.5)", where="verdict.alpha",
                          value=alpha, fix="use 0.025 one-sided (verdict.alpha=0.05 two-sided)")
    return float(alpha)


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


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}", where=f"verdict.{name}",
                          value=value, fix=f"set e.g. verdict.{name}={max(minimum, 100)}")
    return int(value)


@dataclass(frozen=True)
class SignoffTest:
    """One candidate's test: status, interval, p-values and what they rest on.

    ``metric``: "accuracy" (``point`` = delta cand - ref, ``threshold`` = -margin) or
    "agreement" / "churn" (``point`` = agreement with the reference, ``threshold`` = the
    minimum agreement). ``p_noninferiority``: one-sided p of "not better than the
    threshold"; ``p_regression``: one-sided p of "not worse". ``methods``: each interval
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
                f"{self.high:+.4f}]" if self.metric == "accuracy" else
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


def _bootstrap(values: np.ndarray, codes: np.ndarray | None, g: int, *, n_boot: int,
               rng: np.random.Generator, paired: tuple[np.ndarray, np.ndarray] | None
               ) -> tuple[str, np.ndarray]:
    if codes is not None:
        return "cluster", cluster_bootstrap_means(values, codes, g, n_boot=n_boot, rng=rng)[1]
    if paired is not None:
        return "iid", accuracy_deltas(paired[0], paired[1], n_boot=n_boot, rng=rng)[1]
    n = values.size
    return "iid", rng.binomial(n, float(values.mean()), size=n_boot) / n


def _too_small(n: int, min_n: int, g: int, has_groups: bool, min_groups: int) -> str | None:
    if n < min_n:
        return (f"only {n} examples, below verdict.min_n={min_n}: too few to sign off, "
                f"whatever the interval")
    if has_groups and g < min_groups:
        return (f"only {g} groups, below verdict.min_groups={min_groups}: group-level "
                f"variation cannot be estimated")
    return None


def paired_signoff(correct_ref: Any, correct_cand: Any, *, margin: Margin, alpha: float = 0.025,
                   groups: Any = None, n_boot: int = 2000, seed: Seed = 0, min_n: int = MIN_N,
                   min_groups: int = MIN_GROUPS, power: float = 0.8,
                   candidate: str = "") -> SignoffTest:
    """Non-inferiority of the candidate's accuracy (module docstring, rules 1, 2, 5).

    ``correct_ref`` / ``correct_cand``: per-example correctness of the same examples;
    ``groups``: one group key per example (e.g. movie id) or None.
    """
    alpha = check_alpha_one_sided(alpha)
    n_boot = check_n_boot(n_boot)
    min_n = _check_count("min_n", min_n, 1)
    min_groups = _check_count("min_groups", min_groups, 2)
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
    kind, boots = _bootstrap(d, codes, g, n_boot=n_boot, rng=as_rng(seed), paired=(r, c))
    b_low, b_high = (float(v) for v in np.quantile(boots, [alpha, 1.0 - alpha]))
    b_p_ni = (1 + int(np.count_nonzero(boots <= -m))) / (n_boot + 1)
    b_p_reg = (1 + int(np.count_nonzero(boots >= -m))) / (n_boot + 1)
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
    small = _too_small(n, min_n, g, gstats is not None, min_groups)
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
               "bootstrap": {"method": kind, "low": b_low, "high": b_high, "n_boot": n_boot,
                             "p_noninferiority": b_p_ni, "p_regression": b_p_reg}}
    return SignoffTest(candidate=candidate, metric="accuracy", status=status, point=point,
                       low=low, high=high, alpha=alpha, threshold=-m,
                       p_noninferiority=max(s_p_ni, b_p_ni), p_regression=max(s_p_reg, b_p_reg),
                       n=n, ref_value=ref_acc, cand_value=cand_acc, flip_rate=(b + cc) / n,
                       discordant={"b": b, "c": cc}, methods=methods,
                       groups=gstats.to_dict() if gstats else None, reasons=reasons,
                       margin={**margin.to_dict(), "abs": m}, plan_n=plan_n)


def _agreement_test(agree: np.ndarray, *, metric: str, min_agreement: float, alpha: float,
                    groups: Any, n_boot: int, seed: Seed, min_n: int, min_groups: int,
                    power: float, candidate: str) -> SignoffTest:
    return _score_test(agree.astype(np.float64), metric=metric, threshold=min_agreement,
                       higher_is_better=True, proportion=True, alpha=alpha, groups=groups,
                       n_boot=n_boot, seed=seed, min_n=min_n, min_groups=min_groups,
                       power=power, candidate=candidate)


#: what each per-example score is, for the reasons (metric -> phrase)
SCORE_WHAT = {"agreement": "agreement with FP32",
              "churn": "agreement with FP32 (churn gate)",
              "cosine": "cosine to FP32", "recall_at_k": "recall@k of FP32's neighbours",
              "kl": "KL(FP32 || candidate)", "abs_logit": "mean |logit - FP32 logit|"}


def _score_interval(values: np.ndarray, threshold: float, higher: bool, proportion: bool,
                    deff: float, alpha: float, n_groups: int
                    ) -> tuple[float, float, float, dict[str, Any]]:
    """(low, high, one-sided p of "not better than threshold", method facts)."""
    n = values.size
    mean = float(values.mean())
    if proportion:  # Wilson score on the (Rao-Scott) counts
        x = float(values.sum())
        low, high = wilson_interval(x / deff, n / deff, alpha=2 * alpha)
        p = wilson_p_above(x / deff, n / deff, threshold)
        return low, high, p, {"method": "wilson"}
    from scipy.stats import t as student_t

    sd = float(values.std(ddof=1)) if n > 1 else 0.0
    df = max((n_groups if n_groups else n) - 1, 1)
    se = sd * math.sqrt(deff / n)
    q = float(student_t.ppf(1.0 - alpha, df))
    low, high = mean - q * se, mean + q * se
    gap = (mean - threshold) if higher else (threshold - mean)
    if se > 0:
        p = float(student_t.sf(gap / se, df))
    else:
        p = 0.0 if gap > 0 else 1.0
    return low, high, p, {"method": "student_t", "sd": sd, "df": df}


def _score_test(values: np.ndarray, *, metric: str, threshold: float, higher_is_better: bool,
                proportion: bool, alpha: float, groups: Any, n_boot: int, seed: Seed,
                min_n: int, min_groups: int, power: float, candidate: str,
                quantile: dict[str, Any] | None = None) -> SignoffTest:
    """One implementation for every label-free score: per-example ``values`` against a
    declared floor (``higher_is_better``) or ceiling (module docstring, rules 3, 3b)."""
    n = int(values.size)
    mean = float(values.mean())
    higher = higher_is_better
    codes, g, gstats = _groups(groups, values, f"{metric}(groups)")
    deff = gstats.design_effect if gstats else 1.0
    s_low, s_high, s_p_ni, facts = _score_interval(values, threshold, higher, proportion, deff,
                                                   alpha, g)
    rng = as_rng(seed)
    if proportion or codes is not None:
        kind, boots = _bootstrap(values, codes, g, n_boot=n_boot, rng=rng, paired=None)
    else:  # a continuous score: resample examples (each its own cluster)
        kind = "iid"
        boots = cluster_bootstrap_means(values, np.arange(n), n, n_boot=n_boot, rng=rng)[1]
    b_low, b_high = (float(v) for v in np.quantile(boots, [alpha, 1.0 - alpha]))
    worse = boots <= threshold if higher else boots >= threshold
    better = boots >= threshold if higher else boots <= threshold
    b_p_ni = (1 + int(np.count_nonzero(worse))) / (n_boot + 1)
    b_p_reg = (1 + int(np.count_nonzero(better))) / (n_boot + 1)
    low, high = min(s_low, b_low), max(s_high, b_high)
    if higher:  # every score here is at most 1 (agreement, cosine, recall@k, shares)
        high = min(high, 1.0)
    else:  # KL and |logit delta| are >= 0
        low = max(low, 0.0)
    status = _status(low, high, threshold) if higher else _status(-high, -low, -threshold)
    level = 100 * (1 - 2 * alpha)
    what = SCORE_WHAT.get(metric, metric)
    score_name = "Wilson score" if proportion else "Student t"
    off = int(np.count_nonzero(values < threshold if higher else values > threshold))
    if metric in ("agreement", "churn"):
        x = int(np.count_nonzero(values))
        head = (f"{what} {mean:.4f} [{level:g}% CI {low:.4f}, {high:.4f}] vs declared minimum "
                f"{threshold:.4f} (max flip rate {1 - threshold:.4f})")
        tail = f"; {n - x} of {n} predictions flipped"
        discordant = {"flipped": n - x}
        flip_rate = (n - x) / n
        margin = {"min_agreement": threshold}
    elif quantile is not None:
        side = ">=" if higher else "<="
        head = (f"share of examples with {what} {side} {quantile['bound']:g}: {mean:.4f} "
                f"[{level:g}% CI {low:.4f}, {high:.4f}] vs declared minimum {threshold:.4f} "
                f"(the {quantile['quantile']:g} quantile of {what} {side} "
                f"{quantile['bound']:g}; verdict.score_quantile)")
        tail = f"; {n - int(values.sum())} of {n} examples outside the bound"
        discordant = {"outside": n - int(values.sum())}
        flip_rate = (n - float(values.sum())) / n
        margin = {"quantile": quantile["quantile"], "bound": quantile["bound"],
                  "min_share": threshold, "higher_is_better": higher, "kind": "proportion"}
    else:
        bound = "floor" if higher else "ceiling"
        g4 = ".4f" if higher else ".4g"
        head = (f"mean {what} {mean:{g4}} [{level:g}% CI {low:{g4}}, {high:{g4}}] vs declared "
                f"{bound} {threshold:{g4}} ({'PASS when the lower bound is above it' if higher else 'PASS when the upper bound is below it'})")
        tail = (f"; {off} of {n} examples {'below the floor' if higher else 'above the ceiling'}"
                f" (sd {facts.get('sd', 0.0):.4g})")
        discordant = {"outside": off}
        flip_rate = off / n
        margin = {bound: threshold, "higher_is_better": higher,
                  "kind": "proportion" if proportion else "mean"}
    fmt = ".4f" if higher else ".4g"
    reasons = [f"{head}; the wider of {score_name}"
               f"{' (Rao-Scott)' if gstats and proportion else ''} [{s_low:{fmt}}, "
               f"{s_high:{fmt}}] and {kind} bootstrap [{b_low:{fmt}}, {b_high:{fmt}}]; "
               f"one-sided alpha {alpha:g}{tail}"]
    if gstats:
        reasons.append(f"{g} groups, intra-group correlation of {'agreement' if metric in ('agreement', 'churn') else what} "
                       f"{gstats.icc:.3f}, design effect {deff:.2f}")
    small = _too_small(n, min_n, g, gstats is not None, min_groups)
    if small:
        status = INCONCLUSIVE
        reasons.append(small)
    plan_n = None
    if status == INCONCLUSIVE:
        plan_n = _score_size(mean, threshold, higher, proportion, facts.get("sd", 0.0), alpha,
                             power, deff, min_n)
    s_method = facts["method"] + ("_rao_scott" if gstats and proportion else "")
    if gstats and not proportion:
        s_method += "_deff"
    methods = {"score": {"method": s_method, "low": s_low, "high": s_high,
                         "p_noninferiority": s_p_ni, "p_regression": 1.0 - s_p_ni,
                         **{k: v for k, v in facts.items() if k != "method"}},
               "bootstrap": {"method": kind, "low": b_low, "high": b_high, "n_boot": n_boot,
                             "p_noninferiority": b_p_ni, "p_regression": b_p_reg}}
    return SignoffTest(candidate=candidate, metric=metric, status=status, point=mean, low=low,
                       high=high, alpha=alpha, threshold=threshold,
                       p_noninferiority=max(s_p_ni, b_p_ni),
                       p_regression=max(1.0 - s_p_ni, b_p_reg), n=n, ref_value=None,
                       cand_value=mean, flip_rate=flip_rate, discordant=discordant,
                       methods=methods, groups=gstats.to_dict() if gstats else None,
                       reasons=reasons, margin=margin, plan_n=plan_n)


def _score_size(mean: float, threshold: float, higher: bool, proportion: bool, sd: float,
                alpha: float, power: float, deff: float, min_n: int) -> int | None:
    if proportion and higher:
        return required_agreement_size(agreement=mean, min_agreement=threshold, alpha=alpha,
                                       power=power, design_effect=deff, min_n=min_n)
    return required_score_size(mean=mean, threshold=threshold, sd=sd,
                               higher_is_better=higher, alpha=alpha, power=power,
                               design_effect=deff, min_n=min_n)


#: verdict.metric -> (higher is better, the settings key of its declared bound)
SCORE_METRICS = {"agreement": (True, "verdict.min_agreement"),
                 "cosine": (True, "verdict.min_cosine"),
                 "recall_at_k": (True, "verdict.min_recall"),
                 "kl": (False, "verdict.max_kl"),
                 "abs_logit": (False, "verdict.max_abs_logit")}


def score_signoff(scores: Any, *, metric: str, threshold: float, quantile: float | None = None,
                  alpha: float = 0.025, groups: Any = None, n_boot: int = 2000, seed: Seed = 0,
                  min_n: int = MIN_N, min_groups: int = MIN_GROUPS, power: float = 0.8,
                  candidate: str = "") -> SignoffTest:
    """Label-free non-inferiority of a per-example score vs FP32 (rules 3, 3b).

    ``metric`` names the score (:data:`SCORE_METRICS`: agreement, cosine, recall_at_k are
    better higher, kl and abs_logit lower); ``threshold`` is its declared floor or ceiling.
    PASS when the lower bound of the mean is above the floor (upper bound below the
    ceiling). ``quantile`` q: instead of the mean, the share of examples within the bound
    must be shown above ``1 - q`` (the q-quantile, or for ceilings the (1 - q)-quantile,
    is within the bound) - a binary score, tested like agreement.
    """
    alpha = check_alpha_one_sided(alpha)
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
    common = dict(alpha=alpha, groups=groups, n_boot=check_n_boot(n_boot), seed=seed,
                  min_n=_check_count("min_n", min_n, 1),
                  min_groups=_check_count("min_groups", min_groups, 2), power=power,
                  candidate=candidate)
    if quantile is not None:
        if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) \
                or not 0.0 < quantile < 1.0:
            raise ConfigError("the score quantile must be in (0, 1)",
                              where="verdict.score_quantile", value=quantile,
                              fix="set e.g. verdict.score_quantile=0.05, or null for the mean")
        inside = (v >= threshold) if higher else (v <= threshold)
        return _score_test(inside.astype(np.float64), metric=metric,
                           threshold=1.0 - float(quantile), higher_is_better=True,
                           proportion=True,
                           quantile={"quantile": float(quantile), "bound": float(threshold)},
                           **common)
    binary = bool(np.all((v == 0.0) | (v == 1.0)))
    return _score_test(v, metric=metric, threshold=float(threshold), higher_is_better=higher,
                       proportion=binary and higher, **common)


def _agreement_inputs(pred_ref: Any, pred_cand: Any, where: str) -> np.ndarray:
    pr, pc = np.asarray(pred_ref), np.asarray(pred_cand)
    if pr.ndim != 1 or pr.shape != pc.shape or pr.size == 0:
        raise DataError("predictions must be non-empty 1-D label arrays of equal length",
                        where=where, value=(pr.shape, pc.shape),
                        fix="pass the top-1 predictions (argmax of logits) of the same examples")
    return pr == pc


def agreement_signoff(pred_ref: Any, pred_cand: Any, *, min_agreement: float = 0.99,
                      alpha: float = 0.025, groups: Any = None, n_boot: int = 2000,
                      seed: Seed = 0, min_n: int = MIN_N, min_groups: int = MIN_GROUPS,
                      power: float = 0.8, candidate: str = "") -> SignoffTest:
    """Label-free non-inferiority: top-1 agreement with the reference above ``min_agreement``."""
    alpha = check_alpha_one_sided(alpha)
    if isinstance(min_agreement, bool) or not isinstance(min_agreement, (int, float)) \
            or not 0.0 < float(min_agreement) < 1.0:
        raise ConfigError("the minimum agreement must be in (0, 1)",
                          where="verdict.min_agreement", value=min_agreement,
                          fix="set e.g. verdict.min_agreement=0.99")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "agreement_signoff"),
                           metric="agreement", min_agreement=float(min_agreement), alpha=alpha,
                           groups=groups, n_boot=check_n_boot(n_boot), seed=seed,
                           min_n=_check_count("min_n", min_n, 1),
                           min_groups=_check_count("min_groups", min_groups, 2), power=power,
                           candidate=candidate)


def churn_gate(pred_ref: Any, pred_cand: Any, *, max_flip_rate: float, alpha: float = 0.025,
               groups: Any = None, n_boot: int = 2000, seed: Seed = 0, min_n: int = MIN_N,
               min_groups: int = MIN_GROUPS, candidate: str = "") -> SignoffTest:
    """The churn gate: PASS if the flip rate vs FP32 is shown below ``max_flip_rate``.

    ``flip_rate`` of the result is the observed ``1 - agreement``; its interval is
    ``[1 - high, 1 - low]``.
    """
    alpha = check_alpha_one_sided(alpha)
    if isinstance(max_flip_rate, bool) or not isinstance(max_flip_rate, (int, float)) \
            or not 0.0 < float(max_flip_rate) < 1.0:
        raise ConfigError("the maximum flip rate must be in (0, 1)",
                          where="verdict.max_flip_rate", value=max_flip_rate,
                          fix="set e.g. verdict.max_flip_rate=0.05, or null for no gate")
    return _agreement_test(_agreement_inputs(pred_ref, pred_cand, "churn_gate"),
                           metric="churn", min_agreement=1.0 - float(max_flip_rate),
                           alpha=alpha, groups=groups, n_boot=check_n_boot(n_boot), seed=seed,
                           min_n=_check_count("min_n", min_n, 1),
                           min_groups=_check_count("min_groups", min_groups, 2), power=0.8,
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


def churn(pred_ref: Any, pred_cand: Any, *, alpha: float = 0.025, groups: Any = None,
          n_boot: int = 2000, seed: Seed = 0) -> Churn:
    """Every candidate's churn vs FP32, gate or not: the flip rate and its two-sided
    ``1 - 2 alpha`` interval (the wider of Wilson score, Rao-Scott with groups, and the
    iid / cluster bootstrap)."""
    alpha = check_alpha_one_sided(alpha)
    t = _agreement_test(_agreement_inputs(pred_ref, pred_cand, "churn"), metric="churn",
                        min_agreement=0.5, alpha=alpha, groups=groups,
                        n_boot=check_n_boot(n_boot), seed=seed, min_n=1, min_groups=2,
                        power=0.8, candidate="")
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


def plan_power(test: SignoffTest, *, n_available: int | None, power: float = 0.8,
               alpha: float | None = None, basis: str = "dev", min_n: int = MIN_N
               ) -> PowerPlan:
    """The test size this candidate needs for ``power``, planned from ``test`` (dev).

    ``alpha`` defaults to the test's own one-sided alpha; pass the level the family will
    test this candidate at (e.g. alpha / k under Holm).
    """
    a = test.alpha if alpha is None else check_alpha_one_sided(alpha)
    deff = test.design_effect
    if test.metric == "accuracy":
        m = -test.threshold
        effect = min(test.point, 0.0)
        need = required_test_size(flip_rate=test.flip_rate, delta=effect, margin_abs=m, alpha=a,
                                  power=power, design_effect=deff, min_n=min_n)
        what = f"delta {effect:+.4f} (min(dev delta, 0)) against -margin {-m:+.4f}"
        margin = m
    else:
        effect = test.point
        margin = test.threshold
        higher = test.margin.get("higher_is_better", True)
        proportion = test.margin.get("kind", "proportion") == "proportion"
        need = _score_size(effect, margin, higher, proportion,
                           test.methods.get("score", {}).get("sd", 0.0), a, power, deff, min_n)
        label = "agreement" if test.metric in ("agreement", "churn") else test.metric
        what = (f"{label} {effect:.4f} (dev) against "
                f"{'minimum' if higher else 'maximum'} {margin:.4f}")
    if need is None:
        reason = f"{test.candidate}: no test size gives {100 * power:g}% power at {what}"
    else:
        spread = (f"flip rate {test.flip_rate:.4f}" if test.metric in
                  ("accuracy", "agreement", "churn") or "min_agreement" in test.margin else
                  f"sd {test.methods.get('score', {}).get('sd', 0.0):.4g}"
                  if test.margin.get("kind") == "mean" else
                  f"share outside the bound {test.flip_rate:.4f}")
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
