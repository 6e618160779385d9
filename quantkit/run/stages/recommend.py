"""Stage "recommend": among the family members that PASS on test, the one to ship (not slower
than FP16 where latency is measured on the target's runtime; the least estimated GEMM time
where ``gpu.sm`` is set, else the most INT8 nodes), blocked where an engine check that gates
did not pass; and the notes a reviewer must read beside it."""

from __future__ import annotations

from quantkit.run.context import RunContext
from quantkit.run.cost import estimated_cost
from quantkit.run.stages.latency import LatencyReport
from quantkit.run.stages.signoff import SignOff
from quantkit.verdict import recommend_candidate
from quantkit.verdict.protocol import Recommendation

__all__ = ["blocked_by_engine", "deployment_note", "recommend", "target_throughput"]


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


def recommend(ctx: RunContext, signoff: SignOff, artifacts: dict, backend_checks: dict,
              latency: LatencyReport | None) -> tuple[Recommendation, list[str]]:
    """The recommendation among test PASSes (not slower than FP16 where latency is on the
    target runtime) whose engine check PASSed where it gates (run/stages/backend_check.py: on the
    deployment runtime, a check that did not pass blocks), and the notes a reviewer must
    read beside it: the deployed artifact's bound, or that the engine check has not run and
    what to run (quantkit/run/deployment.py)."""
    if signoff.decision is None:
        basis = "test-split sign-off of the declared family (no member tested)"
        return Recommendation(None, "no candidate recommended: no declared member has the "
                                    "planned power to be tested on this test split "
                                    "(verdict.min_power); see the power plan for the size "
                                    "that would do", [], dict(signoff.not_tested), basis), []
    counts = {n: a.plan.counts().get("int8", 0) for n, a in artifacts.items()}
    blocked = blocked_by_engine(backend_checks)
    estimates = estimated_cost(ctx, artifacts)
    label = next(iter(estimates.values())).label if estimates else ""
    rec = recommend_candidate(signoff.decision, int8_nodes=counts,
                              throughput=target_throughput(ctx, latency), blocked=blocked,
                              cost={n: e.ms for n, e in estimates.items()} or None,
                              cost_label=label)
    check = backend_checks.get(rec.candidate) if rec.candidate else None
    notes = [deployment_note(rec.candidate, check)] if check is not None else []
    if estimates:
        e = next(iter(estimates.values()))
        notes.append(f"GEMM time {e.label} (cost model: {e.basis}; {e.shape}; not measured): "
                     + ", ".join(f"{n} {v.ms:.4g} ms" for n, v in estimates.items()))
    return rec, notes


def blocked_by_engine(backend_checks: dict) -> dict[str, str]:
    """name -> why it may not be recommended: its engine check gates (it ran, or should
    have, on the deployment runtime) and did not PASS (run/stages/backend_check.py)."""
    return {n: f"engine check {c.status} on the deployment runtime: {c.what_to_run}"
            for n, c in backend_checks.items() if c.blocks}


def deployment_note(name: str, check) -> str:
    """One line for the recommended candidate: the bound of the deployed artifact, or that
    the engine check has not run and what to run."""
    r = check.to_record()
    b = r.basis.budget if r.basis is not None else None
    signoff, declared = (b.signoff, b.declared) if b is not None else (0, 0)
    if check.not_run:
        return (f"deployment of {name}: {check.what_to_run}; until then the sign-off "
                f"(at {signoff:.4g} of the declared {declared:.4g}) "
                f"bounds the emulation, not the deployed engine")
    if r.status == "not_needed":
        return (f"deployment of {name}: signed on "
                f"{r.basis.deployment if r.basis is not None else None}, the "
                f"deployment runtime itself: the sign-off bounds the deployed artifact")
    tolerance = (r.engine_tolerance if r.engine_tolerance is not None
                 else b.tolerance if b is not None else 0)
    return (f"deployment of {name}: the deployed artifact is bounded by the declared "
            f"{declared:.4g} ({b.metric if b is not None else None}): sign-off at "
            f"{signoff:.4g} + engine check PASS within "
            f"{tolerance:.4g} ({b.units if b is not None else None}; "
            f"{b.composition if b is not None else None})")
