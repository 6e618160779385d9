"""One sign-off test's outcome: PASS / FAIL / INCONCLUSIVE, the typed :class:`SignoffTest`,
the churn gate joined to a test (:func:`with_gate`) and the test size a candidate needs
(:func:`plan_power`). The tests themselves: :mod:`quantkit.verdict.paired_accuracy`,
:mod:`quantkit.verdict.share_tests`, :mod:`quantkit.verdict.macro_f1`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from quantkit.verdict.margin import DELTA_METRICS, MAP_METRIC_NAMES
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.power import (PowerPlan, required_agreement_size, required_bootstrap_size,
                                    required_test_size)

__all__ = ["PASS", "FAIL", "INCONCLUSIVE", "STATUSES", "DEFAULT_POLICY", "SignoffTest", "status_of",
           "with_gate", "plan_power"]

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

#: every status a sign-off test can end in, best first
STATUSES = (PASS, FAIL, INCONCLUSIVE)

#: The policy of a test called without one (alpha 0.025, n_boot 2000, seed 0, min_n
#: :data:`MIN_N`, min_groups :data:`MIN_GROUPS`, power 0.8).
DEFAULT_POLICY = TestPolicy()


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
        d = self.groups.get("design_effect") if self.groups else None
        return float(d) if d is not None else 1.0  # None: not estimated (an mAP bootstrap)

    def __bool__(self) -> bool:
        return self.status == PASS

    def describe(self) -> str:
        return (f"{self.point:+.4f} [{100 * self.level:g}% CI {self.low:+.4f}, "
                f"{self.high:+.4f}]" if self.metric in DELTA_METRICS else
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


def status_of(low: float, high: float, threshold: float) -> str:
    if low > threshold:
        return PASS
    if high < threshold:
        return FAIL
    return INCONCLUSIVE


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
    elif test.metric in MAP_METRIC_NAMES:  # the paired image (group) bootstrap of mAP
        margin = -test.threshold
        effect = min(test.point, 0.0)
        sd = float((test.methods or {}).get("bootstrap", {}).get("sd_of_d", 0.0) or 0.0)
        units = int(test.groups["n_groups"]) if test.groups else int(test.n)
        need = required_bootstrap_size(sd=sd, n=units, effect=effect, margin_abs=margin,
                                       alpha=a, power=power)
        if need is not None and test.groups:  # groups -> images at dev's group size
            need = int(math.ceil(need * test.n / max(units, 1)))
        need = None if need is None else max(need, min_n)
        what = (f"{test.metric} delta {effect:+.4f} (min(dev delta, 0)) against -margin "
                f"{-margin:+.4f}, bootstrap sd of the margin statistic {sd:.4f} on {units} "
                f"{'groups' if test.groups else 'images'}")
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
