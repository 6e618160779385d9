"""The sign-off's dealings with the persistent test ledger, beside the signoff stage: what the
ledger knew of the model, the facts ``record.signoff.ledger`` holds, the members' test
evaluations at a look's alpha, and the execution check of a decided look (another backend:
tested at that look's alpha, charged nothing, a member PASSes only where both executions
PASS: quantkit/verdict/ledger.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quantkit.ledger_location import LedgerLocation
from quantkit.ledger_store import LedgerStore, Look, Reservation
from quantkit.record.migrate import upgrade_look_decision, upgrade_look_family
from quantkit.record.serde import decode
from quantkit.record.signoff import DecisionRecord, FamilyRecord, PowerPlanRecord
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.model_identity import ModelIdentity
from quantkit.verdict import TestLedger, decide_family
from quantkit.verdict.ledger import LookAlpha, both_executions, same_data_rule
from quantkit.verdict.outcome import SignoffTest
from quantkit.verdict.protocol import FamilyDecision, FamilyPlan, SignoffFamily

__all__ = ["CheckedLook", "execution", "execution_check", "ledger_facts", "ledger_knows",
           "log_what_the_ledger_knows", "look_info", "stored_decision", "test_members",
           "with_look"]

log = logging.getLogger(__name__)


def execution(ctx: RunContext) -> dict[str, Any]:
    """What executes the artifacts here: backend settings, Q/DQ mode, host facts."""
    return {"backend": dataclasses.asdict(ctx.settings.backend), "qdq_mode": ctx.qdq_mode(),
            **ctx.measured_key()}


def ledger_knows(res: Reservation, where: LedgerLocation) -> str:
    """One sentence: what the ledger knew of this model before this run (issue 49: say so
    when it has never seen it, and name it)."""
    if res.model_looks == 0:
        head = ("first look in" if res.kind == "new"
                else "no look of this model (none recorded by this run either) in")
        return f"{head} {where.describe()}; looks kept elsewhere are not counted"
    return (f"{res.model_looks} earlier look(s) of this model in {where.describe()}; looks "
            "kept elsewhere are not counted")


def ledger_facts(res: Reservation, *, read: bool, identity: ModelIdentity,
                 where: LedgerLocation, new_study: str | None,
                 check: dict | None = None) -> dict:
    """``record.signoff.ledger``: where the ledger is, which look this is, its alpha, the
    earlier looks it was charged against (the same for a run that reads it), what the ledger
    knew of the model, the new study declared, the execution check this run is."""
    la, look = res.alpha, res.look
    facts = {"path": str(res.path), "model_key": res.model_key or identity.key,
             "model_key_basis": identity.basis, "rule": la.rule, "same_data": same_data_rule(),
             "alpha_one_sided": la.alpha, "alpha_declared": la.alpha_declared,
             "budget": la.budget, "spent_before": la.spent_before,
             "read_from_ledger": read, "location": where.chosen_by,
             "model_looks": res.model_looks, "first_in_ledger": res.model_looks == 0,
             "ledger_knows": ledger_knows(res, where), "joined_by": la.joined_by,
             "new_study": new_study if res.kind in ("new", "none") else
             (look.new_study if look is not None else None)}
    if look is None:
        return {**facts, "look_id": None, "look": None, "earlier_looks": list(res.earlier),
                "summary": "no look recorded: no declared member has the planned power to be "
                           f"tested (it would have been {la.describe()})"}
    summary = la.describe() if check is None else (
        f"execution check of {la.describe()}: its artifacts on its test examples, run here; "
        "charged nothing")
    return {**facts, "look_id": look.id, "look": look.number, "lineage": look.lineage,
            "started": look.started, "n_examples": look.n_examples,
            "example_set": look.example_set, "supersedes": look.supersedes,
            "earlier_looks": list(look.earlier), "other_data_looks": look.other_data_looks,
            "summary": summary, **({"execution_check": check} if check is not None else {})}


def with_look(ev: Evaluation, look_line: str) -> Evaluation:
    """The member's test evaluation with the look it belongs to in its verdict's reasons."""
    t = dataclasses.replace(ev.test, reasons=[*ev.test.reasons, look_line])
    return dataclasses.replace(ev, test=t)


def log_what_the_ledger_knows(res: Reservation, where: LedgerLocation,
                              new_study: str | None) -> None:
    """The ledger's word on this model, and a new study that could not be one."""
    log.info("test ledger: %s", ledger_knows(res, where))
    if new_study and res.kind == "new" and res.alpha.joined_by == "overlap":
        log.warning("test ledger: verdict.new_study=%r, but these test examples overlap earlier "
                    "looks of this model: the look is charged with them (a new study needs "
                    "test data no earlier look has seen)", new_study)


def look_info(res: Reservation) -> dict[str, Any]:
    """The look a decision is (``FamilyDecision.look``): number, id, alpha, rule."""
    la = res.alpha
    return {"look": res.look.number, "id": res.look.id, "alpha_one_sided": la.alpha,
            "alpha_declared": la.alpha_declared, "rule": la.rule}


def stored_decision(look: Look) -> FamilyDecision:
    """The decision the ledger holds for a decided look, as the protocol keeps it."""
    return decode(DecisionRecord, upgrade_look_decision(look.decision),
                  "look.decision").decided()


def test_members(ctx: RunContext, family: SignoffFamily, artifacts: dict,
                 reference_test: Evaluation, la: LookAlpha, line: str,
                 evaluate_member: Callable[..., Evaluation]
                 ) -> tuple[TestLedger, dict[str, SignoffTest], dict[str, Evaluation]]:
    """Each declared member evaluated once on test at the look's alpha, in declared order."""
    test_split = ctx.splits.test
    ledger = TestLedger(family, split_sha256=test_split.sha256)
    tests, evals = {}, {}
    for name in family.candidates:
        art = artifacts[name]
        ledger.record(name, n=len(test_split), evidence_sha256=art.sha256)
        ev = with_look(evaluate_member(ctx, name, art, reference_test, la), line)
        evals[name], tests[name] = ev, ev.test
    return ledger, tests, evals


@dataclass(frozen=True)
class CheckedLook:
    """An execution check's outcome: the look's family and plan, this run's test ledger,
    tests and evaluations, the decision both executions give, and the record's facts of the
    check (``record.signoff.ledger.execution_check``)."""

    family: SignoffFamily
    plan: FamilyPlan
    ledger: TestLedger
    tests: dict[str, SignoffTest]
    evaluations: dict[str, Evaluation]
    decision: FamilyDecision
    info: dict[str, Any]


def execution_check(ctx: RunContext, store: LedgerStore, res: Reservation, artifacts: dict,
                    reference_test: Evaluation,
                    evaluate_member: Callable[..., Evaluation]) -> CheckedLook:
    """This run is the execution check of the decided look ``res.look``: its family tested
    here at its alpha, decided, and combined with its decision (a member PASSes only where
    both executions PASS: quantkit.verdict.ledger.both_executions); recorded, not charged."""
    look, la = res.look, res.alpha
    family = decode(FamilyRecord, upgrade_look_family(look.family), "look.family").declared()
    plan = decode(PowerPlanRecord, look.plan, "look.plan").planned()
    first = stored_decision(look)
    line = (f"execution check of {la.describe()}: tested at that look's alpha, charged "
            "nothing (record.signoff.ledger)")
    ledger, tests, evals = test_members(ctx, family, artifacts, reference_test, la, line,
                                        evaluate_member)
    mine = decide_family(family, tests, ledger=ledger, look=look_info(res))
    before = {r["candidate"]: r["status"] for r in first.rows}
    here = {r["candidate"]: r["status"] for r in mine.rows}
    both = both_executions(before, here)
    where = execution_words(look.execution)
    rows = [{**r, "status": both[r["candidate"]],
             "reason": f"{r['reason']}; with look {look.number}'s decision on {where} "
                       f"({before[r['candidate']]}): {both[r['candidate']]} (both executions "
                       "must PASS)"} for r in mine.rows]
    decision = dataclasses.replace(mine, rows=rows)
    check = store.add_check(look.id, execution=execution(ctx), decision=mine.to_dict(),
                            statuses=here, run_dir=str(ctx.run_dir))
    log.info("sign-off: execution check of look %d (%s): here %s; with its decision on %s: %s; "
             "nothing charged", look.number, look.id[:12],
             ", ".join(f"{n} {s}" for n, s in here.items()), where,
             ", ".join(f"{n} {s}" for n, s in both.items()))
    info = {"of_look": look.id, "first_execution": where, "first_statuses": before,
            "statuses": here, "combined": both, "check_id": check.id,
            "earlier_checks": len(res.checks),
            "rule": "a member PASSes only where every execution of the look PASSes; an "
                    "execution check is tested at the look's alpha and charged nothing"}
    return CheckedLook(family, plan, ledger, tests, evals, decision, info)


def execution_words(execution: dict) -> str:
    """An execution in words: backend and Q/DQ mode (and the CPU where recorded)."""
    backend = (execution.get("backend") or {}).get("name", "?")
    words = f"backend={backend}, Q/DQ {execution.get('qdq_mode', '?')}"
    env = execution.get("environment") or {}
    cpu = env.get("cpu") if isinstance(env, dict) else None
    return f"{words} on {cpu}" if cpu else words
