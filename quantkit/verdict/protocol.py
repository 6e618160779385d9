"""The sign-off protocol: a family declared on dev, one test per candidate, familywise
error control, and a recommendation only among what passed on test.

Order of calls (the run's stages; every choice before step 3 sees dev only):

1. ``dev = {name: paired_signoff(dev evidence) ...}`` (``quantkit.verdict.paired_accuracy``).
2. ``family = declare_family(dev, method="fixed_sequence", alpha=0.025)``: the candidates
   and their test order, fixed from dev: most convincing dev evidence first (smallest dev
   non-inferiority p-value; ties keep the order given). ``family.to_dict()`` records the
   dev basis of the order and a sha256 of the declaration.
3. ``plan = plan_family(family, dev, n_test=...)``: test size for 80% power per candidate
   at the level the family tests it, for the decision rule actually used
   (:mod:`quantkit.verdict.rule_power`), the planned power on the test split, and whether
   the split is large enough. ``declare_powered_family`` declares and plans in one step and
   leaves out the members whose planned power is below ``min_power`` (not tested). In a
   run, ``alpha`` is the look's alpha from the persistent test ledger
   (:mod:`quantkit.verdict.ledger`: look k of a model on overlapping test data).
4. ``ledger = TestLedger(family)``; for each candidate ``ledger.record(name, n=...)`` then
   ``paired_signoff(test evidence)``. A second test evaluation of a candidate, or one of an
   undeclared candidate, raises :class:`TestSplitReuse` (within one run; across runs the
   persistent ledger charges every look).
5. ``decision = decide_family(family, tests, ledger=ledger)``:

   * ``fixed_sequence`` (default): candidates are tested in the declared order, each at the
     full one-sided alpha; the first that does not PASS stops the sequence, and every later
     one is INCONCLUSIVE ("not reached"). Adjusted p-values are the running maximum. This
     controls the familywise error at alpha (Maurer, Hothorn & Lehmacher 1995) and costs
     no power for the first candidate.
   * ``holm``: Holm's step-down on the non-inferiority p-values; PASS if adjusted p < alpha.

   FAIL (a loss beyond the margin) needs Holm-adjusted regression p < alpha across the
   family under either method; a raw FAIL without it is INCONCLUSIVE.
6. ``recommend_candidate(decision, int8_nodes=..., throughput=...)``: among candidates that
   PASS after adjustment and, when throughput on the target's own runtime is given, are not
   slower than FP16 at any measured batch size: the one with the most INT8 nodes (ties:
   higher throughput, then the better delta, then family order). Else no candidate, with
   the reason.

Pure: no I/O, no randomness.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from quantkit.errors import ConfigError, DataError, QuantkitError
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.outcome import FAIL, INCONCLUSIVE, PASS, SignoffTest, plan_power
from quantkit.verdict.policy import check_alpha_one_sided
from quantkit.verdict.paired import holm_adjust

log = logging.getLogger(__name__)

__all__ = ["FamilyDecision", "FamilyPlan", "METHODS", "Recommendation", "SignoffFamily",
           "TestLedger", "TestSplitReuse", "decide_family", "declare_family",
           "declare_powered_family", "plan_family", "recommend_candidate", "signoff_record"]

METHODS = ("fixed_sequence", "holm")


def _json_safe(value: Any) -> Any:
    """Plain JSON types (numpy scalars and arrays converted; non-finite floats become None)."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    return value


class TestSplitReuse(QuantkitError):
    """The test split was asked for a second look (or for an undeclared candidate)."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class SignoffFamily:
    """The declared sign-off family: candidates in test order, the method, one-sided alpha.

    ``basis``: per candidate, the dev evidence the order rests on.
    """

    candidates: tuple[str, ...]
    method: str
    alpha: float
    basis: dict[str, dict[str, Any]] = field(default_factory=dict)
    order_rule: str = "dev_evidence"
    supersedes: str | None = None  # sha256 of the plan this one replaces (e.g. a grown test)

    def to_dict(self) -> dict[str, Any]:
        body = {"candidates": list(self.candidates), "order": list(self.candidates),
                "method": self.method, "alpha_one_sided": self.alpha,
                "order_rule": self.order_rule, "basis": self.basis,
                "supersedes": self.supersedes}
        body = _json_safe(body)
        body["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return body

    @property
    def sha256(self) -> str:
        return self.to_dict()["sha256"]


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise ConfigError("unknown familywise method", where="verdict.family", value=method,
                          fix="use fixed_sequence (order fixed on dev) or holm")
    return method


def declare_family(dev: Mapping[str, SignoffTest], *, method: str = "fixed_sequence",
                   alpha: float = 0.025, order: Sequence[str] | None = None,
                   supersedes: str | None = None) -> SignoffFamily:
    """Declare the family from dev results (before test is touched).

    ``dev``: candidate name -> its dev :class:`SignoffTest`, in the order to break ties by
    (e.g. fp16, the best INT8 by dev, mixed). ``order``: a test order declared by the user
    instead of the dev-evidence order (every candidate exactly once). ``supersedes``: the
    ``sha256`` of an earlier declaration this new plan replaces (an INCONCLUSIVE re-tested on
    a fresh or grown test split is a new plan; the record links the two).
    """
    method = _check_method(method)
    alpha = check_alpha_one_sided(alpha)
    names = list(dev)
    if not names:
        raise ConfigError("a sign-off family needs at least one candidate",
                          where="verdict.family", value=[], fix="declare e.g. fp16, int8, mixed")
    for name, t in dev.items():
        if not isinstance(t, SignoffTest):
            raise ConfigError("dev evidence must be a SignoffTest", where="declare_family",
                              value=(name, type(t).__name__), fix="pass paired_signoff(...)")
    if order is not None:
        given = list(order)
        if sorted(given) != sorted(names) or len(set(given)) != len(given):
            raise ConfigError("a declared order must list every family candidate once",
                              where="verdict.family_order", value=given,
                              fix=f"list each of {names} once")
        ranked, rule = given, "declared"
    else:
        position = {n: i for i, n in enumerate(names)}
        ranked = sorted(names, key=lambda n: (dev[n].p_noninferiority, position[n]))
        rule = "dev_evidence"
    basis = {n: {"dev_status": dev[n].status, "dev_point": dev[n].point, "dev_low": dev[n].low,
                 "dev_high": dev[n].high, "dev_p_noninferiority": dev[n].p_noninferiority,
                 "dev_n": dev[n].n, "dev_flip_rate": dev[n].flip_rate} for n in ranked}
    fam = SignoffFamily(tuple(ranked), method, alpha, basis, rule, supersedes)
    log.info("sign-off family declared on dev (%s, one-sided alpha %g): %s", method, alpha,
             " -> ".join(ranked))
    return fam


def _level_for(family: SignoffFamily, position: int) -> float:
    """The level a candidate is tested at: alpha (fixed sequence) or alpha / k (Holm's
    first step, the conservative planning level)."""
    if family.method == "holm":
        return family.alpha / len(family.candidates)
    return family.alpha


@dataclass(frozen=True)
class FamilyPlan:
    """Power plans of every family candidate, made on dev before the test evaluation."""

    rows: list[dict[str, Any]]
    n_test: int | None
    adequate: bool | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return _json_safe({"rows": self.rows, "n_test": self.n_test,
                           "adequate": self.adequate, "reason": self.reason})


def plan_family(family: SignoffFamily, dev: Mapping[str, SignoffTest], *, n_test: int | None,
                policy: TestPolicy = TestPolicy(), n_groups: int | None = None,
                by_rule: bool = True) -> FamilyPlan:
    """Per candidate, the test size for ``policy.power`` at the level the family tests it
    at (the policy's alpha is replaced by it), for the decision rule actually used
    (``by_rule``: simulated, :mod:`quantkit.verdict.rule_power`, ``policy.sims``
    simulations, 0: its analytic approximation; False: the Tango-only Nam formula), and the
    planned power on ``n_test`` examples.

    ``adequate`` is about the *first* candidate of the order (the one the sequence rests
    on); every row says whether it is large enough for that candidate, and with
    ``policy.min_power`` whether it is to be tested (``tested``).
    """
    from quantkit.verdict.rule_power import plan_by_rule

    rows = []
    for i, name in enumerate(family.candidates):
        if name not in dev:
            raise DataError("the power plan needs dev evidence of every family candidate",
                            where="plan_family", value=name, fix="pass the dict given to "
                                                                 "declare_family")
        level = policy.at(_level_for(family, i))
        if by_rule:
            p = plan_by_rule(dev[name], n_available=n_test, policy=level, n_groups=n_groups)
        else:
            p = plan_power(dev[name], n_available=n_test, policy=level, basis="dev")
        rows.append({**p.to_dict(), "position": i + 1})
    return _family_plan(rows, n_test, policy.power)


def _family_plan(rows: list[dict[str, Any]], n_test: int | None, power: float) -> FamilyPlan:
    first = rows[0]
    adequate = first["adequate"]
    if n_test is None:
        reason = f"{first['reason']} (test size not given)"
    else:
        ok = [r["candidate"] for r in rows if r["adequate"]]
        reason = (f"test split n={n_test}: large enough for {len(ok)} of {len(rows)} "
                  f"declared candidate(s) at {100 * power:g}% power"
                  + (f" ({', '.join(ok)})" if ok else "")
                  + f"; the first in the order, {first['candidate']}, needs "
                  + (f"{first['n_required']}" if first["n_required"] is not None
                     else "more than any size (its dev delta is at or below -margin)"))
    return FamilyPlan(rows=rows, n_test=n_test, adequate=adequate, reason=reason)


def declare_powered_family(dev: Mapping[str, SignoffTest], *, method: str = "fixed_sequence",
                           supersedes: str | None = None, n_test: int | None,
                           policy: TestPolicy = TestPolicy(min_power=0.5),
                           n_groups: int | None = None, by_rule: bool = True
                           ) -> tuple[SignoffFamily | None, FamilyPlan]:
    """Declare the family of the candidates worth testing (all on dev, before test), at
    the family's alpha ``policy.alpha``.

    Every candidate of ``dev`` is planned at the level the family would test it at
    (:func:`plan_family`, the rule actually used); one whose planned power on ``n_test``
    examples is below ``policy.min_power`` is left out of the family and is not tested: the test
    split is not spent on it. Under Holm a smaller family tests at a higher level, so the
    plan is repeated until no member drops out (a member dropped at a lower level is not
    re-added). Returns (the family, or None when no candidate is worth testing; the plan,
    with a row for every candidate of ``dev``: ``tested`` false for those left out).
    """
    alpha = policy.alpha
    if not dev:
        declare_family(dev, method=method, alpha=alpha)  # the one clear error
    names = list(dev)
    dropped: dict[str, dict[str, Any]] = {}
    while True:
        trial = declare_family({n: dev[n] for n in names}, method=method, alpha=alpha,
                               supersedes=supersedes) if names else None
        if trial is None:
            break
        plan = plan_family(trial, dev, n_test=n_test, policy=policy, n_groups=n_groups,
                           by_rule=by_rule)
        low = [r for r in plan.rows if not r.get("tested", True)]
        if not low:
            break
        for r in low:
            dropped[r["candidate"]] = {**r, "position": None}
        names = [n for n in names if n not in dropped]
    kept = [] if trial is None else list(plan.rows)
    rows = kept + [dropped[n] for n in dev if n in dropped]
    for r in rows:
        if r["candidate"] in dropped:
            log.warning("power plan: %s", r["reason"])
    return trial, _family_plan(rows, n_test, policy.power)


class TestLedger:
    """Which candidates were evaluated on the test split, each at most once.

    Built from the declared family (so no test evaluation happens before the declaration).
    ``record`` before (or right after) computing a candidate's test evidence; a second call
    for the same candidate or one for an undeclared candidate raises :class:`TestSplitReuse`.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, family: SignoffFamily, *, split_sha256: str | None = None) -> None:
        if not isinstance(family, SignoffFamily):
            raise ConfigError("a test ledger needs the declared SignoffFamily",
                              where="TestLedger", value=type(family).__name__,
                              fix="call declare_family(dev results) first")
        self.family = family
        self.split_sha256 = split_sha256
        self._entries: list[dict[str, Any]] = []

    def record(self, candidate: str, *, n: int, evidence_sha256: str | None = None) -> int:
        """Log one test evaluation of ``candidate`` on ``n`` examples; returns its index."""
        if candidate not in self.family.candidates:
            raise TestSplitReuse(
                "the test split is only for the declared sign-off family",
                where="verdict test ledger", value=candidate,
                fix=f"declare it on dev before the test split is touched (family: "
                    f"{', '.join(self.family.candidates)})")
        if candidate in self.evaluated:
            first = next(e for e in self._entries if e["candidate"] == candidate)
            raise TestSplitReuse(
                "a second test-split evaluation of the same candidate is refused (a second "
                f"look inflates false PASS; first evaluation was #{first['index']} on "
                f"n={first['n']})", where="verdict test ledger", value=candidate,
                fix="declare a new plan (new family, a fresh or grown test split) and link "
                    "it from the record")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DataError("a test evaluation needs its example count", where="TestLedger.record",
                            value=n, fix="pass n=len(test split)")
        index = len(self._entries)
        self._entries.append({"index": index, "candidate": candidate, "n": int(n),
                              "evidence_sha256": evidence_sha256})
        return index

    @property
    def evaluated(self) -> tuple[str, ...]:
        return tuple(e["candidate"] for e in self._entries)

    def to_dict(self) -> dict[str, Any]:
        missing = [c for c in self.family.candidates if c not in self.evaluated]
        return {"family_sha256": self.family.sha256, "split_sha256": self.split_sha256,
                "evaluations": [dict(e) for e in self._entries],
                "evaluated_once": len(set(self.evaluated)) == len(self.evaluated),
                "missing": missing, "complete": not missing}


@dataclass(frozen=True)
class FamilyDecision:
    """Each family candidate's test interval, raw and adjusted decision, in test order."""

    method: str
    alpha: float
    order: tuple[str, ...]
    rows: list[dict[str, Any]]
    family_sha256: str
    stopped_at: str | None = None
    #: the ledger's look this decision is (number, id, alpha_one_sided, alpha_declared,
    #: rule): quantkit.verdict.ledger; None outside a run (pure use)
    look: dict[str, Any] | None = None

    def status(self, candidate: str) -> str:
        return next(r["status"] for r in self.rows if r["candidate"] == candidate)

    @property
    def passing(self) -> list[str]:
        return [r["candidate"] for r in self.rows if r["status"] == PASS]

    def to_dict(self) -> dict[str, Any]:
        return _json_safe({"method": self.method, "alpha_one_sided": self.alpha,
                           "order": list(self.order), "family_sha256": self.family_sha256,
                           "stopped_at": self.stopped_at, "rows": self.rows,
                           "look": self.look})


def decide_family(family: SignoffFamily, tests: Mapping[str, SignoffTest], *,
                  ledger: TestLedger | None = None,
                  look: Mapping[str, Any] | None = None) -> FamilyDecision:
    """Familywise decision over the declared family (module docstring, step 5).

    ``tests``: candidate -> its test-split :class:`SignoffTest` (a missing one is
    INCONCLUSIVE, "not evaluated"). With ``ledger``, every test must be in it. ``look``:
    which look of the persistent ledger this is (``look`` number, ``id``,
    ``alpha_one_sided``...); the family's alpha must be that look's alpha, and every row
    says the look and its alpha.
    """
    if look is not None and abs(float(look["alpha_one_sided"]) - family.alpha) > 1e-15:
        raise ConfigError("the family is not declared at its look's alpha",
                          where="decide_family(look)", value=(family.alpha,
                                                              look["alpha_one_sided"]),
                          fix="declare the family at the alpha the ledger gave the look")
    extra = sorted(set(tests) - set(family.candidates))
    if extra:
        raise ConfigError("test evidence for a candidate outside the declared family",
                          where="decide_family", value=extra[0],
                          fix="sign off only declared candidates; declare the family on dev")
    if ledger is not None:
        if ledger.family.sha256 != family.sha256:
            raise DataError("the ledger belongs to another family declaration",
                            where="decide_family(ledger)", value=ledger.family.candidates,
                            fix="use the ledger built from this family")
        unlogged = [c for c in tests if c not in ledger.evaluated]
        if unlogged:
            raise DataError("test evidence that the test ledger did not record",
                            where="decide_family(ledger)", value=unlogged[0],
                            fix="call ledger.record(candidate, n=...) for each test evaluation")
    for name, t in tests.items():
        if abs(t.alpha - family.alpha) > 1e-12:
            raise ConfigError("a test's alpha differs from the family's", where="verdict.alpha",
                              value=(name, t.alpha, family.alpha),
                              fix="evaluate every candidate at the family's one-sided alpha")
    alpha = family.alpha
    order = family.candidates
    p_ni = [tests[c].p_noninferiority if c in tests else 1.0 for c in order]
    p_reg = [tests[c].p_regression if c in tests else 1.0 for c in order]
    reg_adj = holm_adjust(p_reg)
    if family.method == "holm":
        ni_adj = holm_adjust(p_ni)
    else:
        ni_adj = np.maximum.accumulate(np.asarray(p_ni, dtype=np.float64))
    rows: list[dict[str, Any]] = []
    reached = True
    stopped_at = None
    for i, name in enumerate(order):
        t = tests.get(name)
        raw = t.status if t is not None else INCONCLUSIVE
        if family.method == "fixed_sequence":
            passed = reached and raw == PASS
        else:
            passed = raw == PASS and ni_adj[i] < alpha
        if passed:
            status, why = PASS, "PASS after familywise control"
        elif reg_adj[i] < alpha and raw == FAIL:
            status, why = FAIL, "loses more than the margin (Holm-adjusted regression p < alpha)"
        else:
            status = INCONCLUSIVE
            if t is None:
                why = "not evaluated on test"
            elif family.method == "fixed_sequence" and not reached:
                why = f"not reached: the fixed sequence stopped at {stopped_at}"
            elif raw == PASS:
                why = "PASS on its own but not after Holm's adjustment"
            elif raw == FAIL:
                why = "FAIL on its own but not after Holm's adjustment"
            else:
                why = "the test interval does not decide"
        if family.method == "fixed_sequence" and reached and raw != PASS:
            reached, stopped_at = False, name
        row = {"candidate": name, "position": i + 1, "raw_status": raw, "status": status,
               "reason": why, "p_noninferiority": p_ni[i],
               "p_noninferiority_adjusted": float(min(1.0, ni_adj[i])),
               "p_regression": p_reg[i], "p_regression_adjusted": float(reg_adj[i])}
        if t is not None:
            row.update(metric=t.metric, point=t.point, low=t.low, high=t.high, level=t.level,
                       threshold=t.threshold, n=t.n, flip_rate=t.flip_rate, plan_n=t.plan_n,
                       groups=t.groups)
        if look is not None:
            row.update(look=look.get("look"), alpha_one_sided=alpha)
        rows.append(row)
    decision = FamilyDecision(family.method, alpha, order, rows, family.sha256, stopped_at,
                              dict(look) if look is not None else None)
    log.info("family decision (%s, one-sided alpha %g): %s", family.method, alpha,
             ", ".join(f"{r['candidate']} {r['status']}" for r in rows))
    return decision


@dataclass(frozen=True)
class Recommendation:
    """The recommended candidate (None: no candidate recommended) and why."""

    candidate: str | None
    reason: str
    eligible: list[str]
    excluded: dict[str, str]
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "reason": self.reason,
                "eligible": list(self.eligible), "excluded": dict(self.excluded),
                "basis": self.basis}


def _throughputs(value: Any) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {str(k): float(v) for k, v in value.items()}
    return {"": float(value)}


def recommend_candidate(decision: FamilyDecision, *, int8_nodes: Mapping[str, int] | None = None,
                        throughput: Mapping[str, Any] | None = None,
                        fp16: str = "fp16",
                        blocked: Mapping[str, str] | None = None,
                        cost: Mapping[str, float] | None = None,
                        cost_label: str = "") -> Recommendation:
    """Recommend among test PASSes only (module docstring, step 6).

    ``cost``: candidate -> estimated time on the target GPU (lower is faster; ``cost_label``
    says where, e.g. "estimated on H200"), used where no throughput was measured on the
    target's runtime: the cheapest PASS is recommended instead of the one with most INT8
    nodes (an FP8 candidate has none).

    ``throughput``: candidate -> throughput (higher is faster) on the *target's own
    runtime*, one number or ``{batch: throughput}``; None when not measured there (then
    speed does not filter). ``int8_nodes``: candidate -> INT8 node count. ``blocked``:
    candidate -> why it may not be recommended although it passed (e.g. its engine check on
    the deployment runtime did not pass); the choice is made among the rest.
    """
    counts = dict(int8_nodes or {})
    excluded: dict[str, str] = {}
    for r in decision.rows:
        if r["status"] != PASS:
            excluded[r["candidate"]] = f"{r['status']} on test ({r['reason']})"
    eligible = decision.passing
    for c in [c for c in eligible if c in (blocked or {})]:
        excluded[c] = str(blocked[c])
    eligible = [c for c in eligible if c not in (blocked or {})]
    basis = (f"test-split sign-off of the declared family ({decision.method}, one-sided alpha "
             f"{decision.alpha:g})")
    if throughput is not None:
        tp = {k: _throughputs(v) for k, v in throughput.items()}
        ref = tp.get(fp16)
        basis += "; speed on the target's own runtime vs FP16"
        if ref is None:
            return Recommendation(None, f"throughput on the target runtime was given but not "
                                        f"for {fp16}: cannot check 'not slower than FP16'",
                                  [], {**excluded, **{c: "no FP16 throughput to compare with"
                                                      for c in eligible}}, basis)
        kept = []
        for c in eligible:
            mine = tp.get(c)
            if mine is None:
                excluded[c] = "no throughput measured on the target runtime"
                continue
            slower = [f"batch {b}: {mine[b]:.1f}/s < FP16 {ref[b]:.1f}/s"
                      for b in sorted(ref) if b in mine and mine[b] < ref[b]]
            if slower:
                excluded[c] = "slower than FP16 (" + "; ".join(slower) + ")"
            else:
                kept.append(c)
        eligible = kept
    if not eligible:
        why = ("no candidate recommended: none PASSes on test after familywise control"
               if not decision.passing else
               "no candidate recommended: every test PASS is blocked (" + "; ".join(
                   f"{c}: {excluded[c]}" for c in decision.passing) + ")"
               if all(c in (blocked or {}) for c in decision.passing) else
               "no candidate recommended: every test PASS is slower than FP16 on the target "
               "runtime or blocked")
        return Recommendation(None, why, [], excluded, basis)
    position = {c: i for i, c in enumerate(decision.order)}
    point = {r["candidate"]: r.get("point", 0.0) for r in decision.rows}
    tp_min = ({c: min(_throughputs(throughput[c]).values()) for c in eligible}
              if throughput is not None else {c: 0.0 for c in eligible})
    if cost is not None and throughput is None and all(c in cost for c in eligible):
        best = min(eligible, key=lambda c: (cost[c], -point[c], position[c]))
        ref = f"; FP16 {cost[fp16]:.4g} ms" if fp16 in cost else ""
        reason = (f"{best}: PASS on test after familywise control, GEMM time {cost[best]:.4g} "
                  f"ms {cost_label}{ref} (the cheapest of {len(eligible)} eligible)")
        return Recommendation(best, reason, list(eligible), excluded,
                              basis + f"; speed {cost_label} (cost model, not measured)")
    best = max(eligible, key=lambda c: (counts.get(c, 0), tp_min[c], point[c], -position[c]))
    reason = (f"{best}: PASS on test after familywise control"
              + (f", {counts[best]} INT8 nodes" if best in counts else "")
              + (", not slower than FP16 on the target runtime" if throughput is not None else "")
              + f" (most INT8 nodes among {len(eligible)} eligible)")
    return Recommendation(best, reason, list(eligible), excluded, basis)


def signoff_record(*, family: SignoffFamily, plan: FamilyPlan, ledger: TestLedger,
                   tests: Mapping[str, SignoffTest], decision: FamilyDecision,
                   recommendation: Recommendation,
                   dev: Mapping[str, SignoffTest] | None = None,
                   persistent: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``record.signoff`` section: JSON-safe, one place for the report to read.
    ``persistent``: the persistent ledger's facts of this look (``record.signoff.ledger``)."""
    if decision.family_sha256 != family.sha256 or ledger.family.sha256 != family.sha256:
        raise DataError("the decision, ledger and family come from different declarations",
                        where="signoff_record", value=family.candidates,
                        fix="pass the values of one run's sign-off")
    return _json_safe({
        "alpha_one_sided": family.alpha, "method": family.method,
        "family": family.to_dict(), "power_plan": plan.to_dict(),
        "dev": {c: t.to_dict() for c, t in (dev or {}).items()},
        "test_ledger": ledger.to_dict(), "test": {c: t.to_dict() for c, t in tests.items()},
        "decision": decision.to_dict(), "recommendation": recommendation.to_dict(),
        **({"ledger": dict(persistent)} if persistent is not None else {})})
