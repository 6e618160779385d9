"""Stage "evaluate" (and the FP32 reference): task evidence of one artifact on the eval split,
with a paired verdict against the FP32 reference. Cached by artifact, data, settings and the
execution environment."""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from quantkit.run.context import RunContext

__all__ = ["Evaluation", "evaluate", "evaluate_artifact", "evaluate_reference", "numerics_note"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """One candidate's evidence (metrics, slices, verdict, kernel census...) and logits.

    ``engine`` is the TensorRT engine the numbers came from (backend=trt), else None.
    """

    name: str
    evidence: dict
    logits: np.ndarray
    cached: bool = False

    @property
    def engine(self) -> dict | None:
        return self.evidence.get("engine")

    @property
    def verdict(self) -> dict | None:
        return self.evidence.get("verdict")

    def metric(self, name: str) -> float:
        return self.evidence["metrics"][name]

    def to_record(self) -> dict:
        return dict(self.evidence)


def evaluate_reference(ctx: RunContext) -> Evaluation:
    """The FP32 model's evidence on the eval split: what every verdict compares against."""
    return evaluate(ctx, "fp32", ctx.model.path, artifact_sha=ctx.model.sha256)


def evaluate(ctx: RunContext, name: str, path, *, reference: Evaluation | None = None,
             plan_int8: list[str] | None = None, emulated: Any = None,
             artifact_sha: str | None = None) -> Evaluation:
    """Evidence of the artifact at ``path`` (cached).

    ``emulated``: the artifact's FP16 emulation (a ModelProto or a zero-argument callable
    building it), whose numbers stand for the artifact on ONNX Runtime CPU;
    ``artifact_sha``: the file's sha256 when known (else computed).
    """
    from quantkit.assets import sha256_file

    s = ctx.settings
    inputs = {"name": name, "artifact": artifact_sha or sha256_file(path),
              "model": ctx.model.sha256, "emulated": emulated is not None,
              "eval": ctx.splits.eval.sha256, "reference": reference is not None,
              "verdict": asdict(s.verdict), "backend": asdict(s.backend), "seed": s.seed,
              "max_length": s.data.max_length, "tokenizer": ctx.model.tokenizer,
              "plan_int8": plan_int8 or [], **ctx.feeds_key(), **ctx.measured_key()}

    def compute():
        em = emulated() if callable(emulated) else emulated
        evidence, logits = _evaluate(ctx, name, path, reference=reference, plan_int8=plan_int8,
                                     emulated=em)
        return evidence, {"logits": logits}

    evidence, arrays, hit = ctx.cached("evaluation", inputs, compute)
    return Evaluation(name=name, evidence=evidence, logits=arrays["logits"], cached=hit)


def _evaluate(ctx: RunContext, name: str, path, *, reference: Evaluation | None,
              plan_int8: list[str] | None, emulated) -> tuple[dict, np.ndarray]:
    """Task evidence of one artifact on the eval split (+ verdict against ``reference``).

    On ONNX Runtime CPU, FP16 ops without CPU kernels run in FP32 between Casts that ORT
    inserts and partly removes, which flatters FP16. When ``emulated`` is given (the same
    plan with FP16 rounding at every FP16 tensor and FP32 compute) task numbers come from it,
    and the artifact itself is only loaded for the kernel census. On TensorRT the engine
    built from the artifact is evaluated directly.
    """
    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import kernel_census
    from quantkit.compare.task import agreement, mean_kl, slice_metrics, task_metrics
    from quantkit.data.feeds import as_feeds
    from quantkit.run.engine import build_trt_engine
    from quantkit.verdict import Margin, ab_verdict

    s, splits = ctx.settings, ctx.splits
    labels = list(range(len(splits.label_names)))
    y = splits.eval.labels
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        t0 = time.perf_counter()
        engine = build_trt_engine(ctx, path, plan_int8) if s.backend.name == "trt" else None
        use_emulation = engine is None and emulated is not None
        if use_emulation:
            with ctx.runner(path, name=f"{name}-census", optimized_to=optimized):
                pass
        if engine is not None:
            from quantkit.backends.trt import TrtRunner

            runner = TrtRunner(engine.engine_path, name=name)
        else:
            runner = ctx.runner(emulated if use_emulation else path, name=name,
                                optimized_to=None if use_emulation else optimized)
        with runner as r:
            logits = run_split(r, ctx.feeds, splits.eval, output=ctx.model.output_name,
                               batch_size=s.backend.batch_size, progress=s.progress,
                               desc=f"eval {name}", lengths=ctx.eval_lengths)
        seconds = time.perf_counter() - t0
        census = kernel_census(optimized) if optimized.exists() else {}
    pred = logits.argmax(axis=1)
    extra_slices = as_feeds(ctx.feeds).slices(ctx.eval_lengths)  # text: token-count buckets
    ev = {"artifact": Path(path).name,
          "numerics": numerics_note(name, s, emulated=use_emulation),
          "metrics": task_metrics(y, logits, labels=labels, label_names=splits.label_names),
          "slices": slice_metrics(y, pred, {"class": y, **extra_slices}),
          "eval_seconds": round(seconds, 3), "n": int(len(y)), "kernel_census": census,
          "backend": s.backend.name}
    if engine is not None:
        ev["engine"] = engine.to_record()
    if reference is not None:
        ref_logits = reference.logits
        ref_pred = ref_logits.argmax(axis=1)
        ev["agreement_fp32"] = agreement(ref_pred, pred)
        ev["mean_kl_fp32"] = mean_kl(ref_logits, logits)
        v = s.verdict
        verdict = ab_verdict(y, ref_pred, pred, margin=Margin(v.margin_kind, v.margin),
                             alpha=v.alpha, metric=v.metric, n_boot=v.n_boot, seed=s.seed,
                             slices={"class": np.array([splits.label_names[i] for i in y]),
                                     **extra_slices},
                             min_slice_n=v.min_slice_n, labels=labels)
        ev["verdict"] = verdict.to_dict()
    return ev, logits


def numerics_note(name: str, settings, *, emulated: bool = False) -> str:
    """One line for the record: how this candidate's numbers were computed."""
    if settings.backend.name == "trt":
        return (f"{name} artifact built into a strongly typed TensorRT engine (precision from "
                "the graph; no precision builder flags)")
    prov = "+".join(p.replace("ExecutionProvider", "") for p in settings.backend.providers)
    off = ",".join(settings.backend.disabled_optimizers) or "none"
    if name == "fp32":
        return f"FP32 on ONNX Runtime {prov}"
    rem = settings.precision.remainder.upper()
    what = "FP16 graph" if name == "fp16" else f"INT8 Q/DQ + {rem} remainder graph"
    if name == "fp16" and rem == "FP32":
        what = "FP32 graph (precision.remainder=fp32: this candidate has no FP16 node)"
    if settings.target != "tensorrt" and name != "fp16":
        what += (f" for target {settings.target} (numbers on ONNX Runtime CPU; not a "
                 "TensorRT prediction)")
    if emulated:
        return (f"{what}, FP16 emulated on ONNX Runtime {prov}: FP32 compute with FP16 rounding "
                f"at every FP16 tensor (ORT CPU lacks FP16 kernels); INT8 Q/DQ exact; disabled "
                f"optimizers: {off}. Kernel census from the artifact itself")
    return f"{what} on ONNX Runtime {prov} (disabled optimizers: {off})"


def evaluate_artifact(ctx: RunContext, artifact, reference: Evaluation, *,
                      plan_int8: bool = True) -> Evaluation:
    """:func:`evaluate` of a built Artifact against the FP32 reference (``plan_int8=False``:
    do not check the engine's INT8 layers against the plan, as for a search step)."""
    return evaluate(ctx, artifact.name, artifact.path, reference=reference,
                    plan_int8=artifact.plan.int8_nodes() if plan_int8 else None,
                    emulated=artifact.emulated, artifact_sha=artifact.sha256)
