"""Power of the decision rule actually used, planned from dev before the test split is read.

The sign-off PASSes an accuracy candidate when the *envelope* of the Tango score interval
and the paired bootstrap clears the margin, joined with the churn gate (intersection-union;
:mod:`quantkit.verdict.paired_accuracy`), and it is INCONCLUSIVE below ``min_n`` examples or
``min_groups`` groups. The Nam (1997, Stat Med 16:187-198) formula of
:mod:`quantkit.verdict.power` is for the Tango test alone. Here the plan runs the rule
itself: test splits of ``n`` examples are simulated from the dev estimates and each is
decided by the run's own functions (``paired_signoff``, ``churn_gate``, ``with_gate``,
``agreement_signoff``); the planned power is the share of PASSes.

* **Accuracy**: every statistic of the rule depends on the data only through four cell
  counts, drawn ``Multinomial(n, p)`` with ``p_b = (f - d) / 2`` (only FP32 right),
  ``p_c = (f + d) / 2`` (only the candidate right), ``p_o = max(f_pred - f, 0)``
  (prediction flipped, neither right) and the rest unchanged; ``f`` is dev's discordant
  rate, ``f_pred`` dev's prediction flip rate (the churn gate's), ``d = min(dev delta, 0)``
  (a plan never counts on beating FP32, the winner's curse of a dev choice). The margin is
  dev's absolute margin.
* **Agreement / a share of examples** (Wilson + bootstrap): agreements ``~ Binomial(n, a)``
  at dev's agreement ``a``.
* **Grouped data**: simulated at the effective size ``n / deff`` (Rao & Scott 1992,
  Biometrics 48:577-585: clustered counts divided by the design effect behave like iid
  counts), with dev's design effect; fewer than ``min_groups`` groups on test: power 0.
* **A continuous mean score** (cosine, KL, |logit delta|, recall@k): the Student-t part of
  the rule in the normal approximation, ``1 - T_df(t_{1-alpha} - gap / se)``, times the
  simulated power of the churn gate when there is one (independence; conservative when the
  two are positively associated). Dev's per-example scores are not kept, so no simulation.
* **mAP** (a detector: :func:`quantkit.verdict.map_bootstrap.map_signoff`, the paired image
  bootstrap of ``D = mAP(cand) - (1 - m) mAP(FP32)``): the normal approximation of that
  bootstrap, ``Phi(gap / se - z_{1-alpha})`` with ``se`` dev's bootstrap standard deviation
  of ``D`` scaled by ``sqrt(units on dev / units on test)`` (images, or groups when grouped)
  and ``gap = min(dev delta, 0) + margin``; the size for a power is the same model solved
  for ``n`` (:func:`quantkit.verdict.power.required_bootstrap_size`). A simulation would need the images' match tables, which a
  plan does not keep.
* **Any other metric**: Nam's normal approximation at the planned effect.

The size for a target power ``1 - beta`` rescales through the normal model
``power ~ Phi(c sqrt(n) - z_{1-alpha})``: ``c`` from the simulated power at the analytic
size, then once more from the simulated power at the rescaled size. When the simulated
power is 0 or 1 there (a rule that is a step in ``n``, e.g. no flips on dev), ``n`` is
doubled or halved until it is not, or the step is bisected to 2%.

:data:`POWER_SIMS` = 400 simulations (``verdict.power_sims``): the standard error of a
planned power is at most 0.025 (at 0.5, where ``verdict.min_power`` decides); planning costs
about 2 s per member at n = 6,000 (paired_signoff with 2,000 resamples, measured on a shared
2-core host). ``sims=0``: the analytic approximations only (Nam / Wilson / t), for callers
that plan thousands of times (simulation benchmarks). Seeded; no I/O.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import norm

from quantkit.verdict.margin import MAP_METRIC_NAMES, Margin
from quantkit.verdict.policy import POWER_SIMS, TestPolicy
from quantkit.verdict.power import (PowerPlan, required_agreement_size,
                                    required_bootstrap_size, required_score_size,
                                    required_test_size)

__all__ = ["POWER_SIMS", "RulePower", "plan_by_rule", "rule_power", "rule_size"]

#: the largest test size a plan simulates and reports ("more than N_MAX" beyond it): a
#: simulated split costs time in proportion to its size (10,000,000 examples: about 70 s per
#: planned power on a 2-core AVX2 host, 1 s at 100,000), and no sign-off set is that large
N_MAX = 100_000


@dataclass(frozen=True)
class RulePower:
    """The planned power of the rule at ``n`` test examples and how it was computed."""

    power: float
    n: int
    method: str
    sims: int


def _kind(test) -> str:
    if test.metric == "accuracy":
        return "accuracy"
    if test.metric in MAP_METRIC_NAMES:
        return "map"
    kind = (test.margin or {}).get("kind")
    if test.metric in ("agreement", "churn") or kind == "proportion":
        return "proportion"
    if kind == "mean":
        return "mean"
    return "other"


def _rng(seed: Any, candidate: str, n: int, what: str) -> np.random.Generator:
    base = seed if isinstance(seed, (int, np.integer)) else 0
    return np.random.default_rng([int(base) & 0xFFFFFFFF, zlib.crc32(candidate.encode()),
                                  int(n) & 0xFFFFFFFF, zlib.crc32(what.encode())])


def _gap(test) -> float:
    """The planned distance to the bound (<= 0: no size gives power)."""
    kind = _kind(test)
    if kind in ("accuracy", "other", "map"):
        return min(test.point, 0.0) - test.threshold
    higher = (test.margin or {}).get("higher_is_better", True)
    return (test.point - test.threshold) if higher else (test.threshold - test.point)


def _gate_facts(test) -> tuple[float, float] | None:
    """(prediction flip rate on dev, max flip rate) of the churn gate, or None."""
    g = test.gate
    if not g:
        return None
    return float(g.get("flip_rate", 0.0)), 1.0 - float(g.get("threshold", 0.9))


def _simulate_accuracy(test, n_eff: int, *, policy: TestPolicy, rng: np.random.Generator
                       ) -> float:
    """The share of ``policy.sims`` simulated test splits of ``n_eff`` examples on which
    ``paired_signoff`` (with the churn gate when ``test`` had one) PASSes at
    ``policy.alpha``; every simulated test draws its bootstrap from ``rng``."""
    from quantkit.verdict.outcome import PASS, with_gate
    from quantkit.verdict.paired_accuracy import paired_signoff
    from quantkit.verdict.share_tests import churn_gate

    f, d, m = float(test.flip_rate), min(float(test.point), 0.0), -float(test.threshold)
    gate = _gate_facts(test)
    f_pred = max(gate[0], f) if gate else f
    p = np.array([(f - d) / 2, (f + d) / 2, f_pred - f, 0.0]).clip(0.0, 1.0)
    p[3] = max(1.0 - p[:3].sum(), 0.0)
    p /= p.sum()
    margin = Margin("absolute", max(m, 0.0))
    sim = replace(policy, seed=rng, min_n=1, min_groups=2)
    passes = 0
    for b, c, o, rest in rng.multinomial(n_eff, p, size=policy.sims):
        ref = np.concatenate([np.ones(b, bool), np.zeros(c + o, bool), np.ones(rest, bool)])
        cand = np.concatenate([np.zeros(b, bool), np.ones(c, bool), np.zeros(o, bool),
                               np.ones(rest, bool)])
        t = paired_signoff(ref, cand, margin=margin, policy=sim)
        if gate is not None:
            pred = np.concatenate([np.ones(b + c + o, np.int64), np.zeros(rest, np.int64)])
            t = with_gate(t, churn_gate(np.zeros(n_eff, np.int64), pred, max_flip_rate=gate[1],
                                        policy=sim))
        passes += t.status == PASS
    return passes / policy.sims


def _simulate_agreement(agreement: float, floor: float, n_eff: int, *, policy: TestPolicy,
                        rng: np.random.Generator) -> float:
    from quantkit.verdict.outcome import PASS
    from quantkit.verdict.share_tests import agreement_signoff

    a = min(max(float(agreement), 0.0), 1.0)
    sim = replace(policy, seed=rng, min_n=1)
    passes = 0
    for k in rng.binomial(n_eff, a, size=policy.sims):
        pred = np.concatenate([np.zeros(k, np.int64), np.ones(n_eff - k, np.int64)])
        t = agreement_signoff(np.zeros(n_eff, np.int64), pred, min_agreement=floor, policy=sim)
        passes += t.status == PASS
    return passes / policy.sims


def _mean_power(test, n_eff: int, alpha: float) -> float:
    from scipy.stats import t as student_t

    sd = float((test.methods or {}).get("score", {}).get("sd", 0.0) or 0.0)
    gap = _gap(test)
    df = max(n_eff - 1, 1)
    if sd <= 0.0:
        return 1.0 if gap > 0 else 0.0
    se = sd / math.sqrt(n_eff)
    return float(student_t.sf(float(student_t.ppf(1.0 - alpha, df)) - gap / se, df))


def _map_units(test, n: int, n_groups: int | None) -> tuple[int, int]:
    """(units on dev, units at a test of ``n`` images): images, or groups when grouped (the
    test's groups, else dev's images per group)."""
    if test.groups:
        g_dev = int(test.groups.get("n_groups") or 1)
        g_test = n_groups if n_groups is not None else max(1, round(n * g_dev / max(test.n, 1)))
        return g_dev, int(g_test)
    return int(test.n), int(n)


def _map_power(test, n: int, alpha: float, n_groups: int | None = None) -> float:
    """The normal approximation of the mAP bootstrap rule (module docstring)."""
    sd = float((test.methods or {}).get("bootstrap", {}).get("sd_of_d", 0.0) or 0.0)
    gap = _gap(test)
    units_dev, units_test = _map_units(test, n, n_groups)
    if sd <= 0.0 or not math.isfinite(sd):
        return 1.0 if gap > 0 else 0.0
    se = sd * math.sqrt(units_dev / max(units_test, 1))
    return float(norm.cdf(gap / se - norm.ppf(1.0 - alpha)))


def _analytic_power(test, n: int, alpha: float, min_n: int = 1) -> float:
    """The power ``p`` whose analytic size (Nam / Wilson / t: :func:`_analytic_size`) is
    ``n`` (bisection in ``p``)."""
    lo, hi = 1e-4, 1.0 - 1e-4

    def need(p: float) -> float:
        k = _analytic_size(test, power=p, alpha=alpha, min_n=1)
        return math.inf if k is None else k
    if need(lo) > n:
        return 0.0
    if need(hi) <= n:
        return hi
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if need(mid) <= n else (lo, mid)
    return lo


def rule_power(test, *, n: int, policy: TestPolicy, n_groups: int | None = None) -> RulePower:
    """The planned power of ``test``'s decision rule on ``n`` test examples at one-sided
    ``policy.alpha`` with ``policy.sims`` simulations (module docstring). ``test``: the
    candidate's dev :class:`SignoffTest`; ``n_groups``: groups of the test split (grouped
    data), else None."""
    alpha, sims, min_n = policy.alpha, policy.sims, policy.min_n
    kind = _kind(test)
    deff = float(test.design_effect)
    grouped = test.groups is not None
    n = int(n)
    n_eff = max(int(round(n / deff)), 1)
    if n < min_n or (grouped and n_groups is not None and n_groups < policy.min_groups):
        why = "below verdict.min_n" if n < min_n else "too few groups (verdict.min_groups)"
        return RulePower(0.0, n, f"{why}: the rule is INCONCLUSIVE whatever the data", 0)
    if kind == "map":
        return RulePower(_map_power(test, n, alpha, n_groups), n,
                         "normal approximation of the paired mAP bootstrap (dev's bootstrap "
                         "spread scaled to the test size)", 0)
    if sims <= 0 or kind == "other":  # no simulation: the analytic approximation
        why = "verdict.power_sims=0" if sims <= 0 else f"{test.metric}: no simulated rule"
        return RulePower(_analytic_power(test, n, alpha), n,
                         f"analytic approximation (Nam / Wilson / t; {why})", 0)
    rng = _rng(policy.seed, test.candidate, n, f"{kind}{alpha:.6g}")
    where = f" at effective n {n_eff} (n / design effect {deff:.2f})" if grouped else ""
    if kind == "accuracy":
        p = _simulate_accuracy(test, n_eff, policy=policy, rng=rng)
        gate = " + churn gate" if test.gate else ""
        return RulePower(p, n, f"simulation of paired_signoff (Tango + bootstrap envelope)"
                               f"{gate}{where}", sims)
    if kind == "proportion":
        p = _simulate_agreement(test.point, test.threshold, n_eff, policy=policy, rng=rng)
        method, used = f"simulation of the Wilson + bootstrap agreement rule{where}", sims
    else:
        p, method, used = _mean_power(test, n_eff, alpha), (
            f"normal approximation of the Student-t rule{where}"), 0
    gate = _gate_facts(test)
    if gate is not None:
        p *= _simulate_agreement(1.0 - gate[0], 1.0 - gate[1], n_eff, policy=policy, rng=rng)
        method += " x simulated churn gate"
        used = sims
    return RulePower(p, n, method, used)


def _analytic_size(test, *, power: float, alpha: float, min_n: int) -> int | None:
    deff = float(test.design_effect)
    kind = _kind(test)
    if kind == "map":
        sd = float((test.methods or {}).get("bootstrap", {}).get("sd_of_d", 0.0) or 0.0)
        units_dev, _ = _map_units(test, int(test.n), None)
        need = required_bootstrap_size(sd=sd, n=units_dev, effect=min(test.point, 0.0),
                                       margin_abs=-test.threshold, alpha=alpha, power=power)
        if need is None:
            return None
        if test.groups:  # groups -> images at dev's group size
            need = int(math.ceil(need * test.n / max(units_dev, 1)))
        return max(need, min_n)
    if kind in ("accuracy", "other"):
        return required_test_size(flip_rate=test.flip_rate, delta=min(test.point, 0.0),
                                  margin_abs=-test.threshold, alpha=alpha, power=power,
                                  design_effect=deff, min_n=min_n)
    if kind == "proportion":
        return required_agreement_size(agreement=test.point, min_agreement=test.threshold,
                                       alpha=alpha, power=power, design_effect=deff,
                                       min_n=min_n)
    higher = (test.margin or {}).get("higher_is_better", True)
    return required_score_size(mean=test.point, threshold=test.threshold,
                               sd=float((test.methods or {}).get("score", {}).get("sd", 0.0)),
                               higher_is_better=higher, alpha=alpha, power=power,
                               design_effect=deff, min_n=min_n)


def rule_size(test, *, policy: TestPolicy) -> int | None:
    """Test examples for ``policy.power`` under the rule at ``policy.alpha`` (module
    docstring); None when the planned effect is at or beyond the bound (no size gives
    power)."""
    power, alpha, min_n, sims = policy.power, policy.alpha, policy.min_n, policy.sims
    if _gap(test) <= 1e-12:
        return None
    start = _analytic_size(test, power=power, alpha=alpha, min_n=min_n)
    if start is None or sims <= 0 or _kind(test) == "map":
        return start
    start = min(start, N_MAX)
    za, zt = float(norm.ppf(1.0 - alpha)), float(norm.ppf(power))
    clip = 1.0 / (2 * sims)

    anywhere = replace(policy, min_n=1)

    def at(n: int) -> float:
        return rule_power(test, n=n, policy=anywhere).power

    def rescale(n: int, p: float) -> int:
        c = (float(norm.ppf(min(max(p, clip), 1.0 - clip))) + za) / math.sqrt(n)
        return N_MAX if c <= 0 else min(int(math.ceil(((zt + za) / c) ** 2)), N_MAX)

    n, p = start, at(start)
    lo = hi = None  # sizes known to give power <= clip / >= 1 - clip
    for _ in range(40):  # the normal model needs a power strictly inside (0, 1)
        if clip < p < 1.0 - clip:
            break
        if p <= clip:
            lo = n
        else:
            hi = n
        if lo is not None and hi is not None:  # a step (e.g. no flips on dev): bisect it
            if hi - lo <= max(1, lo // 50):
                return max(hi, int(min_n))
            n = max(int(math.sqrt(lo * hi)), lo + 1)
        elif hi is None:
            if n >= N_MAX:
                return N_MAX
            n = min(2 * n, N_MAX)
        else:
            if n <= 1:
                return max(1, int(min_n))
            n = max(n // 2, 1)
        p = at(n)
    n1 = rescale(n, p)
    n2 = rescale(n1, at(n1)) if n1 < N_MAX else N_MAX
    return max(n2, int(min_n))


def plan_by_rule(test, *, n_available: int | None, policy: TestPolicy,
                 n_groups: int | None = None) -> PowerPlan:
    """One candidate's plan for the rule actually used: the analytic plan of
    :func:`quantkit.verdict.plan_power` with ``n_required`` replaced by :func:`rule_size`,
    plus ``planned_power`` at ``n_available``, ``n_required_formula`` (Nam / Wilson / t),
    ``power_method`` and, with ``policy.min_power``, whether the member is tested."""
    from quantkit.verdict.outcome import plan_power

    power, alpha, min_power = policy.power, policy.alpha, policy.min_power
    base = plan_power(test, n_available=n_available, policy=policy, basis="dev")
    need = rule_size(test, policy=policy)
    planned = None if n_available is None else rule_power(
        test, n=n_available, policy=policy, n_groups=n_groups)
    tested = True if (min_power is None or planned is None) else planned.power >= min_power
    name = test.candidate
    reason = (f"{name}: " + (f"more than {N_MAX} test examples needed for {100 * power:g}% "
                             "power" if need is not None and need >= N_MAX else
                             f"about {need} test examples give {100 * power:g}% power"
                             if need is not None else
                             f"no test size gives {100 * power:g}% power (the dev estimate "
                             "is at or beyond the bound)")
              + f" under the rule actually used, one-sided alpha {alpha:.4g}")
    if planned is not None:
        reason += (f"; planned power at the test split's {n_available}: {planned.power:.2f} "
                   f"({planned.method})")
    if not tested:
        reason += (f"; below verdict.min_power {min_power:g}: not tested (the test split is "
                   "not spent on it)"
                   + (f"; a test split of about {need} examples would do" if need else ""))
    extra = {**base.extra, "planned_power": None if planned is None else planned.power,
             "power_method": None if planned is None else planned.method,
             "power_sims": None if planned is None else planned.sims,
             "n_required_formula": base.n_required, "min_power": min_power, "tested": tested}
    return replace(base, n_required=need, reason=reason, extra=extra)
