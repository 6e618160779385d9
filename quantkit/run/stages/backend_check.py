"""Stage "backend_check": the engine check. The artifact as the deployment runtime runs it
vs the execution its signed numbers come from, on a dev subset, gated in the decision
metric's own units at the engine's share of the declared budget (quantkit/run/deployment.py,
quantkit/verdict/engine_gate.py).

Statuses (``BackendCheck.status``):

* ``pass``: the engine is shown within its tolerance of the emulation; with the sign-off
  at the rest of the budget the deployed artifact has the declared bound.
* ``fail`` / ``inconclusive``: not shown; where the check runs on the deployment runtime
  (``backend=trt``; ``target=ort_cpu`` on ONNX Runtime CPU) the candidate is not
  recommended, and the record says what to run.
* ``not_run``: the deployment runtime is not on this host (``target=tensorrt`` without
  ``backend=trt``): the record and the summary say so and where to run it; nothing on this
  host stands in for it (ORT's fused CPU kernels are not a TensorRT engine).
* ``not_needed``: the signed numbers are the deployment runtime's own (``target=ort_cpu``
  evaluated with ORT CPU's fused kernels).
* ``disabled``: ``compare.backend_check_subset=0`` where the check would run: it gates as a
  check that did not pass.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np

from quantkit.backends.batched import run_split
from quantkit.backends.trt.infer import runner_for
from quantkit.record.candidate import BackendCheckRecord
from quantkit.record.serde import decode
from quantkit.run.artifact import Artifact
from quantkit.run.context import RunContext
from quantkit.run.deployment import engine_check_plan, quantile_split, signoff_budget
from quantkit.run.detection import is_detection
from quantkit.run.engine import build_trt_engine
from quantkit.run.evaluation import Evaluation, recall_gallery
from quantkit.run.verdicts import decision_metric, example_scores, split_groups
from quantkit.verdict.engine_gate import (FAITHFUL_POWER, FLIP_METRICS, check_size,
                                         faithful_power, faithful_size, flip_gate,
                                         macro_f1_gate, score_gate)
from quantkit.verdict.margin import LABELLED_METRICS

__all__ = ["BackendCheck", "backend_check", "gate_outputs"]

log = logging.getLogger(__name__)

PASSED = ("pass", "not_needed")


@dataclass(frozen=True)
class BackendCheck:
    """One candidate's check on the deployment runtime: ``status`` (pass, not_needed, fail,
    not_run...), whether it ``gates`` the recommendation here, what to run where it could not
    run; ``result`` is the record's ``backend_check`` entry (plan, budget, gate...), read by
    nothing but :meth:`to_record`."""

    result: Mapping[str, object]
    status: str = "not_needed"
    gates: bool = False
    what_to_run: str = ""

    @classmethod
    def of(cls, result: Mapping[str, object]) -> "BackendCheck":
        """The check with its typed fields read once from ``result`` (the cached JSON)."""
        return cls(result=result, status=str(result.get("status", "not_needed")),
                   gates=bool(result.get("gates_recommendation")),
                   what_to_run=str(result.get("what_to_run", "")))

    @property
    def ok(self) -> bool:
        return self.status in PASSED

    @property
    def blocks(self) -> bool:
        """The check gates here (it runs on the deployment runtime) and did not pass."""
        return self.gates and not self.ok

    @property
    def not_run(self) -> bool:
        return self.status == "not_run"

    def to_record(self) -> BackendCheckRecord:
        return decode(BackendCheckRecord, self.result, "backend_check")


def backend_check(ctx: RunContext, artifact: Artifact, reference: Evaluation, *,
                  family_size: int = 1) -> BackendCheck:
    """Cached by artifact, dev data, compare + backend + verdict settings, the family's size
    and the execution environment. ``reference``: the FP32 evaluation on dev (its accuracy
    converts a relative margin into a flip rate); ``family_size``: how many candidates can be
    recommended, each through its own gate: each gate runs at alpha / family_size
    (Bonferroni), since the recommendation takes any member whose gate passed (measured:
    benchmarks/results/verdict_validity.md, engine_recall)."""
    s = ctx.settings
    plan = engine_check_plan(s)
    if not plan.required or not plan.runs_here:
        return BackendCheck.of(_unchecked(ctx, plan))
    if is_detection(ctx):  # no engine gate in mAP units yet: it gates, as not passed
        return BackendCheck.of({**_unchecked(ctx, plan), "gates_recommendation": True,
                                "what_to_run": "engine check NOT run: the engine check of "
                                "detection outputs is not implemented; compare the engine's "
                                "detections with the emulation's before deploying"})
    inputs = {"artifact": artifact.sha256, "dev": ctx.splits.dev.sha256,
              "compare": asdict(s.compare), "backend": asdict(s.backend),
              "verdict": asdict(s.verdict), "target": s.target, "engine_gate": 3,
              "qdq_mode": ctx.qdq_mode(), "family_size": int(family_size),
              **ctx.feeds_key(), **ctx.measured_key()}
    obj, _, _ = ctx.cached("backend_check", inputs,
                           lambda: (_check(ctx, artifact, reference, plan, family_size), None))
    return BackendCheck.of(obj)


def _metric(ctx: RunContext) -> str:
    return decision_metric(ctx)


def _base(ctx: RunContext, plan) -> dict:
    metric = _metric(ctx)
    return {"plan": plan.to_dict(), "deployment": plan.deployment, "compared": plan.compared,
            "metric": metric, "budget": signoff_budget(ctx.settings, metric).to_dict()}


def _unchecked(ctx: RunContext, plan) -> dict:
    out = {**_base(ctx, plan), "checked": False, "gates_recommendation": False}
    if not plan.required:
        return {**out, "status": "not_needed", "ok": True, "what_to_run": "",
                "reason": plan.reason}
    return {**out, "status": "not_run", "ok": False, "reason": plan.reason,
            "what_to_run": f"engine check NOT run: {plan.how_to_run}"}


def _limits(ctx: RunContext, metric: str, reference) -> tuple[float, float | None, float]:
    """The engine's part of the budget: ``(tolerance, quantile, limit)``. The tolerance is in
    the gate's units (a relative margin times FP32's dev accuracy, a flip rate, or dev
    macro-F1; every other budget is in its units already); the quantile is the engine's
    share of ``verdict.score_quantile`` (label-free shares, else None); the limit is what
    the exact binomial count is held to: that share, else the flip rate."""
    s = ctx.settings
    budget = signoff_budget(s, metric)
    tol = budget.tolerance
    if metric in LABELLED_METRICS and s.verdict.margin_kind == "relative":
        tol = budget.tolerance * float(reference.metric(metric))
    quantile = quantile_split(s, metric)[1]
    return tol, quantile, float(quantile) if quantile is not None else float(tol)


def _what_to_run(status: str, gate, n: int, plan) -> str:
    if status == "inconclusive" and gate.n_needed:
        return (f"engine check inconclusive on {n} dev examples: rerun with "
                f"compare.backend_check_subset>={gate.n_needed} (and a dev split at least "
                f"that large) to decide it")
    if status == "inconclusive":
        return (f"engine check inconclusive on {n} dev examples: a larger dev split "
                "(data.dev) and compare.backend_check_subset would decide it")
    return (f"engine check failed ({plan.compared}): the deployed engine differs from the "
            "signed numbers by more than its tolerance; inspect the per-layer report and keep "
            "the diverging layers out of INT8 (precision.force), then rerun")


def _planned(metric: str, limit: float, n: int, alpha: float
             ) -> tuple[int | None, float | None]:
    """The compared examples a faithful engine needs to pass with power 0.8 and its power at
    ``n``, for the exact binomial gates; (None, None) for macro-F1, whose bootstrap gate is
    not planned (its power at a quarter of the tolerance is low at dev sizes: measured in
    benchmarks/results/verdict_validity.md)."""
    if metric == "macro_f1":
        return None, None
    return faithful_size(limit, alpha=alpha), faithful_power(n, limit, alpha=alpha)


def gate_alpha(ctx: RunContext, family_size: int = 1) -> float:
    """Each member's gate alpha: the policy's alpha over the family's size (Bonferroni)."""
    return ctx.policy.alpha / max(1, int(family_size))


def compared_size(ctx: RunContext, available: int, reference, family_size: int = 1) -> int:
    """How many dev examples the check compares: for the exact binomial gates (flips, the
    label-free shares) the size of ``available`` with the highest power for a faithful engine
    (:func:`quantkit.verdict.engine_gate.check_size`); all of them for macro-F1."""
    metric = decision_metric(ctx)
    if metric == "macro_f1" or available <= 1:
        return available
    return check_size(_limits(ctx, metric, reference)[2], available,
                      alpha=gate_alpha(ctx, family_size))


def _check(ctx: RunContext, art: Artifact, reference, plan, family_size: int = 1) -> dict:
    s, dev = ctx.settings, ctx.splits.dev
    base = _base(ctx, plan)
    n = compared_size(ctx, min(s.compare.backend_check_subset, len(dev)), reference,
                      family_size)
    if n == 0:
        return {**base, "checked": False, "gates_recommendation": True, "status": "disabled",
                "ok": False, "what_to_run": "engine check disabled "
                "(compare.backend_check_subset=0): set it > 0 to check the deployed artifact"}
    sub, lengths = ctx.head(dev, n), ctx.split_lengths("dev", n)
    gallery = recall_gallery(ctx) if base["metric"] == "recall_at_k" else None

    def predict(runner) -> tuple[np.ndarray, np.ndarray | None]:
        with runner as r:
            out = run_split(r, ctx.feeds, sub, output=ctx.model.output_name,
                            batch_size=s.backend.batch_size, progress=False, lengths=lengths)
            gal = None if gallery is None else run_split(
                r, ctx.feeds, gallery, output=ctx.model.output_name,
                batch_size=s.backend.batch_size, progress=False)
        return out, gal

    signed = art.emulated() if art.emulated is not None else art.path
    if s.backend.name == "trt":
        engine = build_trt_engine(ctx, art.path, None)
        deployed, dep_gallery = predict(runner_for(s, engine, name="check-engine"))
    else:  # target=ort_cpu on ONNX Runtime CPU: its fused integer kernels
        deployed, dep_gallery = predict(ctx.runner(art.path, name="check-artifact",
                                                   qdq_mode="fused"))
    emulated, emu_gallery = predict(ctx.runner(signed, name="check-emulated"))
    galleries = None if gallery is None else (emu_gallery, dep_gallery)
    return gate_outputs(ctx, plan, deployed, emulated, reference, labels=sub.labels,
                        name=art.name, galleries=galleries, family_size=family_size)


def gate_outputs(ctx: RunContext, plan, deployed: np.ndarray, emulated: np.ndarray, reference,
                 *, labels: np.ndarray | None = None, name: str = "candidate",
                 galleries: tuple[np.ndarray, np.ndarray] | None = None,
                 family_size: int = 1) -> dict:
    """The engine check's result from the two executions' outputs on the compared dev
    examples (``deployed``: the deployment runtime's, ``emulated``: the signed numbers';
    ``galleries``: for recall@k, the sign-off's fixed gallery embedded by the emulation and
    by the deployment runtime): the gate at the engine's tolerance in the decision metric's
    units, and the size a faithful engine needs to pass with power 0.8
    (``benchmarks/verdict_validity.py`` feeds it simulated outputs)."""
    s = ctx.settings
    base = _base(ctx, plan)
    n = int(len(deployed))
    metric = base["metric"]
    tol, quantile, limit = _limits(ctx, metric, reference)
    policy = replace(ctx.policy, min_n=min(ctx.policy.min_n, n),
                     alpha=gate_alpha(ctx, family_size))
    what = plan.compared
    if metric in FLIP_METRICS:
        flips = int((deployed.argmax(axis=1) != emulated.argmax(axis=1)).sum())
        gate = flip_gate(flips, n, tolerance=tol, policy=policy, metric=metric, what=what)
    elif metric == "macro_f1":
        groups = split_groups(ctx, "dev")
        gate = macro_f1_gate(labels, emulated.argmax(axis=1), deployed.argmax(axis=1),
                             n_classes=len(ctx.splits.label_names), tolerance=tol,
                             policy=policy, groups=None if groups is None else groups[:n],
                             what=what)
    else:
        if metric == "recall_at_k":  # each query in the sign-off's fixed gallery
            scores = example_scores(metric, emulated, deployed, recall_k=s.verdict.recall_k,
                                    ref_gallery=None if galleries is None else galleries[0],
                                    gallery=None if galleries is None else galleries[1])
            what += " (recall@k in the sign-off's fixed gallery)"
        else:
            scores = example_scores(metric, emulated, deployed)
        gate = score_gate(scores, metric=metric, tolerance=tol, quantile=quantile,
                          policy=policy, what=what)
    planned, power = _planned(metric, limit, n, policy.alpha)
    status = gate.status
    out = {**base, "checked": True, "gates_recommendation": True, "n": n, "status": status,
           "ok": status == "pass", "gate": gate.to_dict(), "engine_tolerance": tol,
           "planned_n": planned, "faithful_power": power,
           "what_to_run": "" if status == "pass" else _what_to_run(status, gate, n, plan)}
    if power is not None and power < FAITHFUL_POWER and status != "pass":
        short = (f"the engine check compared {n} dev examples, where a faithful engine "
                 f"passes with power {power:.2f}; {planned} would give it "
                 f"{FAITHFUL_POWER:g}: set data.dev (and compare.backend_check_subset) to at "
                 f"least {planned}")
        out["what_to_run"] = "; ".join(w for w in (out["what_to_run"], short) if w)
        log.warning("%s", short)
    if getattr(ctx.model, "output_kind", "logits") != "embedding":
        out["agreement"] = float((deployed.argmax(axis=1) == emulated.argmax(axis=1)).mean())
        y = labels
        if y is not None:
            out["accuracy"] = {"artifact": float((deployed.argmax(axis=1) == y).mean()),
                               "emulated": float((emulated.argmax(axis=1) == y).mean())}
    if status != "pass":
        log.warning("engine check of %s: %s", name, " ".join(gate.reasons))
    return out
