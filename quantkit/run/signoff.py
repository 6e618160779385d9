"""Stage "signoff": declare the family on dev, plan the power, test each member once on the
locked test split, decide with familywise error control (quantkit/verdict/protocol.py).

Everything before this stage (calibrator choice, ranking, search, thresholds) saw only the
dev split. Here the family (fp16, the best INT8 by dev, the mixed candidate when the search
made one) is declared from dev results *before* the test split is touched; each member is
evaluated on test exactly once (the TestLedger refuses a second look); the decision is a
fixed-sequence (or Holm) test at one-sided alpha = ``verdict.alpha / 2``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation, evaluate

__all__ = ["SignOff", "family_members", "sign_off", "signoff_skip_reason", "recommend_signed",
           "target_throughput", "blocked_by_engine", "deployment_note"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignOff:
    """The declared family, its power plan, the test ledger, each member's test evaluation
    and the familywise decision."""

    family: Any  # SignoffFamily
    plan: Any  # FamilyPlan
    ledger: Any  # TestLedger
    dev: dict  # name -> SignoffTest on dev (the declaration's basis)
    tests: dict  # name -> SignoffTest on test
    decision: Any  # FamilyDecision
    evaluations: dict = field(default_factory=dict)  # name -> Evaluation on test

    def status(self, name: str) -> str:
        return self.decision.status(name)

    def to_record(self, recommendation) -> dict:
        from quantkit.verdict import signoff_record

        return signoff_record(family=self.family, plan=self.plan, ledger=self.ledger,
                              tests=self.tests, decision=self.decision,
                              recommendation=recommendation, dev=self.dev)


def family_members(ctx: RunContext, evaluations: dict[str, Evaluation],
                   mixed: Evaluation | None, mixed_fp16_layers: int = 0) -> list[str]:
    """The sign-off family, chosen on dev: fp16, the INT8 candidate with the best dev metric,
    and the mixed candidate when the search kept at least one layer out of INT8 (with none it
    is the best INT8 candidate again).

    The best INT8 candidate: dev values within :data:`~quantkit.compare.ties.DEV_TIE_SHARE`
    of the leader's dev interval width are tied, and the tie goes to the earliest
    calibrator in the configured order (``calibrator.methods``), not to float noise."""
    from quantkit.compare.ties import DEV_TIE_SHARE, best_with_ties
    from quantkit.run.verdicts import decision_value

    names = [n for n in ("fp16",) if n in evaluations]
    int8 = [n for n in evaluations if n.startswith("int8.")]
    if int8:  # decision_value: larger is better (kl / abs_logit negated)
        values = {n: decision_value(ctx, evaluations[n]) for n in int8}
        leader = max(int8, key=lambda n: (values[n], -int8.index(n)))
        t = evaluations[leader].test
        width = (t.high - t.low) if t is not None else 0.0
        names.append(best_with_ties(values, order=int8, tolerance=DEV_TIE_SHARE * width))
    if mixed is not None and mixed_fp16_layers > 0:
        names.append("mixed")
    return names


def signoff_skip_reason(settings) -> str | None:
    """Why this run leaves the test split alone, or None.

    A Hydra multirun job is one look among many: a sweep that compared its jobs on their
    test results would choose on test. Sweep jobs therefore rank on dev and sign nothing
    off; the sweep report names the chosen job's command, whose plain run signs off once
    (``verdict.signoff_in_sweeps=true`` signs off in every job)."""
    from quantkit.run.context import is_sweep_job

    if settings.verdict.signoff_in_sweeps or not is_sweep_job():
        return None
    return ("sweep job (python -m quantkit -m ...): jobs are compared on dev and the test split "
            "is not touched; rerun the chosen job without -m to sign it off once on test")


def sign_off(ctx: RunContext, members: list[str], artifacts: dict, dev: dict[str, Evaluation],
             reference_test: Evaluation) -> SignOff:
    """Declare ``members`` on their dev tests, plan power, evaluate each once on test, decide.

    ``artifacts``: name -> Artifact (path, plan, emulation); ``dev``: name -> dev Evaluation.
    """
    from quantkit.verdict import TestLedger, decide_family, declare_family, plan_family

    v = ctx.settings.verdict
    dev_tests = {n: dev[n].test for n in members}
    family = declare_family(dev_tests, method=v.family, alpha=v.alpha / 2,
                            supersedes=v.supersedes)
    test_split = ctx.splits.test
    plan = plan_family(family, dev_tests, n_test=len(test_split), power=v.power, min_n=v.min_n)
    for row in plan.to_dict().get("rows", []):
        if not row.get("adequate", True):
            log.warning("power plan: %s", row.get("reason"))
    ledger = TestLedger(family, split_sha256=test_split.sha256)
    tests, evals = {}, {}
    for name in family.candidates:  # in the declared order; each exactly once
        art = artifacts[name]
        ledger.record(name, n=len(test_split), evidence_sha256=art.sha256)
        ev = evaluate(ctx, name, art.path, split="test", reference=reference_test,
                      plan_int8=art.plan.int8_nodes(), emulated=art.emulated,
                      artifact_sha=art.sha256)
        evals[name], tests[name] = ev, ev.test
    decision = decide_family(family, tests, ledger=ledger)
    log.info("sign-off on test (%s): %s", family.method,
             ", ".join(f"{n} {decision.status(n)}" for n in family.candidates))
    return SignOff(family=family, plan=plan, ledger=ledger, dev=dev_tests, tests=tests,
                   decision=decision, evaluations=evals)


def target_throughput(ctx: RunContext, latency) -> dict | None:
    """Throughput per candidate and batch, only when measured on the target's own runtime
    (ONNX Runtime CPU for target=ort_cpu, a TensorRT engine for backend=trt); else None."""
    s = ctx.settings
    on_target = s.backend.name == "trt" or (
        s.target == "ort_cpu" and list(s.backend.providers) == ["CPUExecutionProvider"])
    if latency is None or not on_target:
        return None
    return {n: {b: st["throughput"] for b, st in per.items()
                if isinstance(st, dict) and "throughput" in st}
            for n, per in latency.candidates.items()}


def recommend_signed(ctx: RunContext, signoff: SignOff, artifacts: dict, backend_checks: dict,
                     latency) -> tuple[Any, list[str]]:
    """The recommendation among test PASSes (not slower than FP16 where latency is on the
    target runtime) whose engine check PASSed where it gates (run/backend_check.py: on the
    deployment runtime, a check that did not pass blocks), and the notes a reviewer must
    read beside it: the deployed artifact's bound, or that the engine check has not run and
    what to run (quantkit/run/deployment.py)."""
    from quantkit.verdict import recommend_candidate

    counts = {n: a.plan.counts().get("int8", 0) for n, a in artifacts.items()}
    blocked = blocked_by_engine(backend_checks)
    rec = recommend_candidate(signoff.decision, int8_nodes=counts,
                              throughput=target_throughput(ctx, latency), blocked=blocked)
    check = backend_checks.get(rec.candidate) if rec.candidate else None
    return rec, ([deployment_note(rec.candidate, check)] if check is not None else [])


def blocked_by_engine(backend_checks: dict) -> dict[str, str]:
    """name -> why it may not be recommended: its engine check gates (it ran, or should
    have, on the deployment runtime) and did not PASS (run/backend_check.py)."""
    return {n: f"engine check {c.status} on the deployment runtime: {c.what_to_run}"
            for n, c in backend_checks.items() if c.blocks}


def deployment_note(name: str, check) -> str:
    """One line for the recommended candidate: the bound of the deployed artifact, or that
    the engine check has not run and what to run."""
    r = check.to_record()
    b = r.get("budget") or {}
    if check.not_run:
        return (f"deployment of {name}: {check.what_to_run}; until then the sign-off "
                f"(at {b.get('signoff', 0):.4g} of the declared {b.get('declared', 0):.4g}) "
                f"bounds the emulation, not the deployed engine")
    if r.get("status") == "not_needed":
        return (f"deployment of {name}: signed on {r.get('deployment')}, the "
                f"deployment runtime itself: the sign-off bounds the deployed artifact")
    return (f"deployment of {name}: the deployed artifact is bounded by the declared "
            f"{b.get('declared', 0):.4g} ({b.get('metric')}): sign-off at "
            f"{b.get('signoff', 0):.4g} + engine check PASS within "
            f"{r.get('engine_tolerance', b.get('tolerance', 0)):.4g} ({b.get('units')}; "
            f"{b.get('composition')})")
