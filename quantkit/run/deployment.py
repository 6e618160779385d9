"""Where the deployed artifact runs, whether this run can check it there, and the budget
split that gives the deployed artifact one bound (quantkit/verdict/engine_gate.py).

Decided from the settings alone, before any evaluation, so that every choice on dev and the
sign-off on test decide with the same share of the declared margin:

* ``target=tensorrt``: the deployed artifact is a TensorRT engine. The signed numbers come
  from the exact Q/DQ emulation (``backend=ort``) or from an engine built here
  (``backend=trt``); either way an engine check (engine vs the plan's emulation) is part of
  the bound, and only ``backend=trt`` runs it. On a host without TensorRT the record says
  that it has NOT run and where to run it; ORT's fused CPU kernels are not the deployment
  and are not compared.
* ``target=ort_cpu``: the deployed artifact runs on ONNX Runtime CPU with its fused integer
  kernels. When the signed numbers are those very kernels (``backend=ort``, CPU provider
  only, ``qdq_mode`` fused, no FP16 emulation) nothing stands between them and the
  deployment: no check, the sign-off keeps the whole margin. Otherwise the check compares
  ORT CPU's fused execution with the execution the numbers come from, and gates.
"""

from __future__ import annotations

from quantkit.backends.ort import evaluation_qdq_mode
from quantkit.verdict.engine_gate import (SHARE_METRICS, DeploymentBudget, EngineCheckPlan,
                                         split_budget, split_quantile)
from quantkit.verdict.margin import DELTA_METRICS

__all__ = ["EngineCheckPlan", "engine_check_plan", "signoff_budget", "declared_budget",
           "quantile_split"]


def _eval_qdq_mode(settings) -> str:
    mode = settings.backend.qdq_mode
    return evaluation_qdq_mode(settings.target) if mode == "auto" else mode


def engine_check_plan(settings) -> EngineCheckPlan:
    """The plan for ``settings`` (module docstring)."""
    b = settings.backend
    if settings.target == "tensorrt":
        deployment = "a TensorRT engine built from the artifact on the target GPU"
        compared = "TensorRT engine vs the exact Q/DQ emulation of the same plan"
        if b.name == "trt":
            return EngineCheckPlan(True, True, deployment, compared,
                                   "runs here (backend=trt)",
                                   "backend=trt: the engine built here is checked against "
                                   "the plan's emulation")
        return EngineCheckPlan(
            True, False, deployment, compared,
            "run the same command with backend=trt on the target GPU (tensorrt >= 10 "
            "installed): the engine check runs there and gates the recommendation",
            f"backend={b.name} does not run TensorRT engines; ONNX Runtime's CPU kernels are "
            "not the deployment and are not compared")
    deployment = "ONNX Runtime CPU with its fused integer kernels (target=ort_cpu)"
    compared = "ONNX Runtime CPU (fused kernels) vs the execution the numbers come from"
    cpu_only = b.name == "ort" and list(b.providers) == ["CPUExecutionProvider"]
    own = (cpu_only and _eval_qdq_mode(settings) == "fused"
           and settings.precision.remainder == "fp32")
    if own:
        return EngineCheckPlan(False, True, deployment, compared, "not needed",
                               "the signed numbers are ONNX Runtime CPU's own fused kernels, "
                               "the deployment runtime")
    if cpu_only:
        return EngineCheckPlan(True, True, deployment, compared, "runs here (ONNX Runtime CPU)",
                               "the signed numbers come from another execution (qdq_mode "
                               f"{_eval_qdq_mode(settings)}) than the deployment's fused kernels")
    return EngineCheckPlan(True, False, deployment, compared,
                           "run the same command with backend=ort and "
                           "backend.providers=[CPUExecutionProvider] on the deployment CPU",
                           f"backend={b.name} with providers {list(b.providers)} is not "
                           "ONNX Runtime CPU")


def declared_budget(settings, metric: str) -> float:
    """The declared budget of ``metric`` in its deficit units: the margin value (relative or
    absolute, as declared) for accuracy / macro_f1; 1 - the floor for agreement, cosine,
    recall@k; the ceiling for kl, abs_logit."""
    v = settings.verdict
    if metric in DELTA_METRICS:  # accuracy, macro_f1, a detector's mAP: the margin
        return float(v.margin)
    return {"agreement": 1.0 - v.min_agreement, "cosine": 1.0 - v.min_cosine,
            "recall_at_k": 1.0 - v.min_recall, "kl": v.max_kl,
            "abs_logit": v.max_abs_logit}[metric]


def signoff_budget(settings, metric: str):
    """:class:`~quantkit.verdict.engine_gate.DeploymentBudget` of ``metric``: split by
    ``compare.numerics_margin_share`` when an engine check is part of the bound, else kept
    whole (share 0). An absolute margin of 0 (nothing may be lost) has nothing to split."""
    declared = declared_budget(settings, metric)
    share = settings.compare.numerics_margin_share if engine_check_plan(settings).required \
        else 0.0
    if declared <= 0:
        return DeploymentBudget(metric=metric, share=float(share), declared=float(declared),
                                signoff=float(declared), tolerance=0.0,
                                units=split_budget(metric, 1.0, 0.0).units,
                                composition="nothing to split: the declared budget is 0")
    quantile = settings.verdict.score_quantile if metric in SHARE_METRICS else None
    return split_budget(metric, declared, share, quantile)


def quantile_split(settings, metric: str) -> tuple[float | None, float | None]:
    """(the sign-off's, the engine gate's) share of examples allowed outside the per-example
    bound for a label-free share metric: ``verdict.score_quantile`` split by the budget's
    share (:func:`quantkit.verdict.engine_gate.split_quantile`; all of it to the sign-off
    when no engine check is part of the bound); ``(score_quantile, None)`` otherwise."""
    q = settings.verdict.score_quantile
    if metric not in SHARE_METRICS or q is None:
        return q, None
    return split_quantile(q, signoff_budget(settings, metric).share)
