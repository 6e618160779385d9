"""Stage "signoff": declare the family on dev, plan the power of the rule actually used,
take the look's alpha from the persistent test ledger, test each member once on the locked
test split, decide with familywise error control (quantkit/verdict/protocol.py).

Everything before this stage (calibrator choice, ranking, search, thresholds) saw only the
dev split. Here, before the test split is touched, one write transaction of the persistent
test ledger (quantkit/ledger_store.py; rules: quantkit/verdict/ledger.py) finds the earlier
looks of this model on these test examples, gives this look its alpha, and the family is
declared and planned at that alpha: the family is fp16, the INT8 candidate with the highest
planned power on dev evidence (:func:`family_members`) and the mixed candidate when the
search made one, less every member whose planned power is below
``verdict.min_power`` (not tested: the split is not spent on it). Each member is then
evaluated on test exactly once (the in-run TestLedger refuses a second look) and the
family is decided by fixed sequence (or Holm) at the look's alpha; the decision is written
to the ledger. A rerun identical in every input reads the earlier decision instead; a run of
a decided look's artifacts on its test data on another execution (``backend=trt`` after
ONNX Runtime) is that look's execution check (:func:`_execution_check`): tested at the look's
alpha, charged nothing, a member PASSes only where both executions PASS.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx

from quantkit.compare.ties import DEV_TIE_SHARE, best_with_ties
from quantkit.ledger_location import ledger_location
from quantkit.ledger_store import LedgerStore, example_hashes
from quantkit.record.migrate import upgrade_look_family
from quantkit.record.serde import decode
from quantkit.record.signoff import FamilyRecord, PowerPlanRecord, SignoffRecord
from quantkit.run import looks
from quantkit.run.context import RunContext, is_sweep_job
from quantkit.run.evaluation import Evaluation, evaluate_model
from quantkit.run.model_identity import model_identity
from quantkit.run.verdicts import decision_metric, decision_value, split_groups
from quantkit.verdict import TestLedger, decide_family, declare_powered_family, signoff_record
from quantkit.verdict.ledger import decision_key, look_basis
from quantkit.verdict.outcome import SignoffTest
from quantkit.verdict.protocol import FamilyDecision, FamilyPlan, SignoffFamily, _json_safe
from quantkit.verdict.rule_power import rule_power

__all__ = ["POWER_TIE", "SignOff", "evaluate_on_test", "family_members", "planned_powers",
           "signoff", "signoff_skip_reason"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignOff:
    """The declared family, its power plan, the test ledger, each member's test evaluation
    and the familywise decision. ``family`` / ``ledger`` / ``decision`` are None when no
    member was worth testing (no look); ``look``: the persistent ledger's facts
    (``record.signoff.ledger``)."""

    family: SignoffFamily | None
    plan: FamilyPlan
    ledger: TestLedger | None  # this run's: each member once
    dev: dict[str, SignoffTest]  # on dev (the declaration's basis)
    tests: dict[str, SignoffTest]  # on test
    decision: FamilyDecision | None
    evaluations: dict[str, Evaluation] = field(default_factory=dict)  # on test
    look: dict[str, object] = field(default_factory=dict)  # the persistent ledger's facts of
    # this look, as record.signoff.ledger writes them

    def status(self, name: str) -> str:
        return self.decision.status(name)

    @property
    def not_tested(self) -> dict[str, str]:
        """Declared candidates left out by the power plan: name -> the plan's reason."""
        return {r["candidate"]: r["reason"] for r in self.plan.rows
                if not r.get("tested", True)}

    def to_record(self, recommendation) -> SignoffRecord:
        if self.family is None:  # nothing tested: the plan and the ledger facts only
            return decode(SignoffRecord, _json_safe({
                "alpha_one_sided": self.look.get("alpha_one_sided"), "method": None,
                "family": {"candidates": [], "not_tested": list(self.not_tested)},
                "power_plan": self.plan.to_dict(),
                "dev": {c: t.to_dict() for c, t in self.dev.items()}, "test": {},
                "decision": None, "recommendation": recommendation.to_dict(),
                "ledger": self.look, "not_tested": self.not_tested}), "signoff")
        out = signoff_record(family=self.family, plan=self.plan, ledger=self.ledger,
                             tests=self.tests, decision=self.decision,
                             recommendation=recommendation, dev=self.dev, persistent=self.look)
        out["not_tested"] = self.not_tested
        return decode(SignoffRecord, out, "signoff")


def family_members(ctx: RunContext, evaluations: dict[str, Evaluation],
                   mixed: Evaluation | None) -> list[str]:
    """The sign-off family, chosen on dev: fp16, the INT8 candidate most likely to PASS on
    test (and the FP8 one, where the target has FP8: ``precision.formats``), and ``mixed``
    when given (the search's candidate when it is declared:
    :func:`quantkit.run.stages.search.declared_mixed`).

    The INT8 candidate most likely to PASS: the highest planned power of the sign-off's own
    rule (margin and churn gate, :func:`quantkit.verdict.rule_power.rule_power`) on the test
    split's size from its dev evidence; planned powers within :data:`POWER_TIE` of the
    highest are tied (simulation noise), and among those the best dev metric wins, dev
    values within :data:`~quantkit.compare.ties.DEV_TIE_SHARE` of the leader's dev interval
    width tied again and going to the earliest calibrator in the configured order
    (``calibrator.methods``), not to float noise. The best dev metric alone can pick a
    candidate the churn gate then leaves untested (measured on bert_int8:
    benchmarks/results/bert_int8.md, "Figures behind the rules in quantkit/run/")."""
    names = [n for n in ("fp16",) if n in evaluations]
    for fmt in ("int8.", "fp8."):  # the best candidate of each quantized format
        cands = [n for n in evaluations if n.startswith(fmt)]
        if not cands:
            continue
        power = planned_powers(ctx, {n: evaluations[n] for n in cands})
        top = max(power.values())
        cands = [n for n in cands if power[n] >= top - POWER_TIE]
        values = {n: decision_value(ctx, evaluations[n]) for n in cands}  # larger is better
        leader = max(cands, key=lambda n: (values[n], -cands.index(n)))
        t = evaluations[leader].test
        width = (t.high - t.low) if t is not None else 0.0
        names.append(best_with_ties(values, order=cands, tolerance=DEV_TIE_SHARE * width))
    if mixed is not None:
        names.append("mixed")
    return names


#: planned powers within this distance of the highest are tied (the simulation's standard
#: error at ``verdict.power_sims`` 400 is up to 0.025)
POWER_TIE = 0.05


def planned_powers(ctx: RunContext, evaluations: dict[str, Evaluation]) -> dict[str, float]:
    """name -> the planned power of the sign-off's rule on the test split's size from the
    dev evidence, at the declared alpha (0.0 without dev evidence). Reads the test split's
    size and groups, never its examples' outputs."""
    n_test, n_groups = len(ctx.splits.test), _test_groups(ctx)
    return {n: 0.0 if ev.test is None else
            float(rule_power(ev.test, n=n_test, policy=ctx.policy, n_groups=n_groups).power)
            for n, ev in evaluations.items()}


def _test_groups(ctx: RunContext) -> int | None:
    """How many groups the test split has (grouped data), else None: what the power plan
    reads of the test split besides its size."""
    codes = split_groups(ctx, "test")
    return None if codes is None else int(len(set(codes.tolist())))


def signoff_skip_reason(settings) -> str | None:
    """Why this run leaves the test split alone, or None.

    A Hydra multirun job is one look among many: a sweep that compared its jobs on their
    test results would choose on test. Sweep jobs therefore rank on dev and sign nothing
    off; the sweep report names the chosen job's command, whose plain run signs off once
    (``verdict.signoff_in_sweeps=true`` signs off in every job)."""
    if settings.verdict.signoff_in_sweeps or not is_sweep_job():
        return None
    return ("sweep job (python -m quantkit -m ...): jobs are compared on dev and the test split "
            "is not touched; rerun the chosen job without -m to sign it off once on test")


#: verdict.* keys that say where looks are kept and how they are charged, not what a look
#: decides (a rerun that only names the ledger or a new study decides the same)
_NOT_DECIDING = ("ledger", "ledger_path", "new_study")


def _basis(ctx: RunContext) -> dict[str, Any]:
    """What a look decides about apart from its execution (quantkit.verdict.ledger.look_basis):
    the model file, the test split, the verdict settings, seed and feeds."""
    s = ctx.settings
    return dict(model=ctx.model.sha256, test_split=ctx.splits.test.sha256,
                verdict={k: v for k, v in dataclasses.asdict(s.verdict).items()
                         if k not in _NOT_DECIDING},
                seed=s.seed, max_length=s.data.max_length,
                tokenizer=getattr(ctx.model, "tokenizer", None), feeds=ctx.feeds_key())


def _decision_key(ctx: RunContext, members: list[str], artifacts: dict,
                  dev_tests: dict) -> str:
    """Everything the test decision depends on (quantkit.verdict.ledger.decision_key): the
    look's basis, its execution, the members' artifacts and their dev evidence."""
    return decision_key(**_basis(ctx), members={n: artifacts[n].sha256 for n in members},
                        dev={n: dev_tests[n].to_dict() for n in members},
                        qdq_mode=ctx.qdq_mode(),
                        backend=dataclasses.asdict(ctx.settings.backend),
                        environment=ctx.measured_key())


def evaluate_on_test(ctx: RunContext, name: str, artifact, reference_test: Evaluation,
                     look) -> Evaluation:
    """One declared member's test Evaluation: the artifact run on the test split, its paired
    test at the look's alpha (``look``: the ledger's LookAlpha)."""
    return evaluate_model(ctx, name, artifact.path, split="test", reference=reference_test,
                    plan_int8=artifact.plan.int8_nodes(),
                    plan_fp8=artifact.plan.nodes_with("fp8"), emulated=artifact.emulated,
                    artifact_sha=artifact.sha256, look=look)


def signoff(ctx: RunContext, members: list[str], artifacts: dict, dev: dict[str, Evaluation],
            reference_test: Evaluation, *,
            evaluate_member: Callable[..., Evaluation] | None = None) -> SignOff:
    """Plan and declare ``members`` on their dev tests at the look's alpha, evaluate each
    once on test, decide, and record the look in the persistent ledger (module docstring).

    ``artifacts``: name -> Artifact (path, plan, emulation); ``dev``: name -> dev Evaluation.
    ``evaluate_member(ctx, name, artifact, reference_test, look)``: how one declared member
    is evaluated on test at the look's alpha (default :func:`evaluate_on_test`, the
    artifact run on the test split); ``benchmarks/verdict_validity.py`` passes simulated
    outputs through the same ``candidate_test`` so that everything else here is the run's.
    """
    s, v = ctx.settings, ctx.settings.verdict
    policy = ctx.policy
    dev_tests = {n: dev[n].test for n in members}
    test_split = ctx.splits.test
    n_groups = _test_groups(ctx)
    held: dict[str, Any] = {}

    def planner(alpha):
        if alpha.exhausted:
            rows = [{"candidate": n, "tested": False, "planned_power": 0.0, "n_required": None,
                     "n_available": len(test_split), "adequate": False,
                     "alpha_one_sided": 0.0, "position": None,
                     "reason": f"{n}: not tested: {alpha.describe()}"} for n in members]
            held["family"], held["plan"] = None, FamilyPlan(rows, len(test_split), False,
                                                            alpha.describe())
            return None
        held["family"], held["plan"] = declare_powered_family(
            dev_tests, method=v.family, supersedes=supersedes, n_test=len(test_split),
            policy=policy.at(alpha.alpha), n_groups=n_groups)
        fam = held["family"]
        return None if fam is None else {"family": fam.to_dict(), "plan": held["plan"].to_dict(),
                                         "metric": decision_metric(ctx)}

    identity = ctx.identity or model_identity(s, ctx.model, onnx.load(ctx.model.path),
                                              cached=ctx.cached,
                                              environment=ctx.measured_key())
    where = ledger_location(s, quiet=True)  # the preflight logged a deprecated key
    store = LedgerStore(where.target)
    supersedes = store.look(v.supersedes).id if v.supersedes else None  # the full id
    res = store.reserve(model_key=identity.key, model_sha256=ctx.model.sha256,
                        model_basis=identity.basis, fingerprint=identity.fingerprint,
                        examples=example_hashes(test_split),
                        split_sha256=test_split.sha256,
                        decision_key=_decision_key(ctx, members, artifacts, dev_tests),
                        alpha_declared=policy.alpha, supersedes=supersedes, planner=planner,
                        run_dir=str(ctx.run_dir), new_study=v.new_study,
                        look_basis=look_basis(**_basis(ctx)),
                        members={n: artifacts[n].sha256 for n in members},
                        execution=looks.execution(ctx),
                        facts={"margin": v.margin, "margin_kind": v.margin_kind,
                               "seed": s.seed, "n_test": len(test_split),
                               "test_split_sha256": test_split.sha256})
    looks.log_what_the_ledger_knows(res, where, v.new_study)

    def facts(read: bool, check: dict | None = None) -> dict:
        return looks.ledger_facts(res, read=read, identity=identity, where=where,
                             new_study=v.new_study, check=check)

    if res.kind == "none":
        log.warning("sign-off: no family member tested (%s); the test split is not spent",
                    "; ".join(r["reason"] for r in held["plan"].rows))
        return SignOff(family=None, plan=held["plan"], ledger=None, dev=dev_tests, tests={},
                       decision=None, look=facts(False))
    if res.kind == "check":  # another execution of a decided look's artifacts
        c = looks.execution_check(ctx, store, res, artifacts, reference_test,
                                  evaluate_member or evaluate_on_test)
        return SignOff(family=c.family, plan=c.plan, ledger=c.ledger, dev=dev_tests,
                       tests=c.tests, decision=c.decision, evaluations=c.evaluations,
                       look=facts(False, c.info))
    look, la = res.look, res.alpha
    read = res.kind == "read"
    if read:  # the identical earlier look: its family, plan and decision stand
        family = decode(FamilyRecord, upgrade_look_family(look.family), "look.family").declared()
        plan = decode(PowerPlanRecord, look.plan, "look.plan").planned()
    else:
        family, plan = held["family"], held["plan"]
    look_info = looks.look_info(res)
    line = f"{la.describe()} (persistent test ledger: record.signoff.ledger)"
    ledger, tests, evals = looks.test_members(ctx, family, artifacts, reference_test, la, line,
                                              evaluate_member or evaluate_on_test)
    decision = decide_family(family, tests, ledger=ledger, look=look_info)
    if not read:
        stored, first = store.complete(look.id, decision=decision.to_dict(), members=[
            {**{k: r.get(k) for k in ("candidate", "position", "metric", "status", "raw_status",
                                      "point", "low", "high", "p_noninferiority")},
             "artifact_sha256": artifacts[r["candidate"]].sha256} for r in decision.rows])
        read = not first  # another run with the same inputs decided it first: that stands
        look = stored
    if read and look.decision:  # same decision key: the same inputs; the first decision stands
        stored_decision = looks.stored_decision(look)
        if [r["status"] for r in stored_decision.rows] != [r["status"] for r in decision.rows]:
            log.warning("sign-off: the recomputed decision differs from the one the ledger "
                        "holds for look %s; the recorded (first) decision stands", look.id[:12])
        decision = stored_decision
        log.info("sign-off read from the test ledger: look %d (%s), %s; nothing charged",
                 look.number, look.id[:12], look.started)
    log.info("sign-off on test (%s, %s): %s", family.method, la.describe(),
             ", ".join(f"{n} {decision.status(n)}" for n in family.candidates))
    return SignOff(family=family, plan=plan, ledger=ledger, dev=dev_tests, tests=tests,
                   decision=decision, evaluations=evals, look=facts(read))


