"""Task evidence of one artifact on one split (dev for every choice, test only for the
sign-off), with a paired test against the FP32 reference on the same split: what the stages
fp32_reference, evaluate, search and signoff run. Logits and evidence are cached by artifact, split, settings and the
execution environment; the paired test (run/verdicts.py) is recomputed from them."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from quantkit.assets import sha256_file
from quantkit.backends.batched import run_split
from quantkit.backends.engine_meta import EngineFile
from quantkit.backends.ort import kernel_census, qdq_mode_note
from quantkit.backends.trt.infer import engine_numerics_note, runner_for
from quantkit.compare.embedding import embedding_evidence
from quantkit.compare.task import agreement, mean_kl, slice_metrics, task_metrics
from quantkit.data.gallery import recall_gallery as draw
from quantkit.environment import cpu_isa
from quantkit.run.context import RunContext
from quantkit.run.detection import detect_split, detection_evidence, is_detection
from quantkit.run.detection_samples import draw_samples
from quantkit.run.engine import build_trt_engine
from quantkit.run.verdicts import candidate_test
from quantkit.tasks.detection.packed import PackedDetections
from quantkit.verdict import TestSplitReuse
from quantkit.verdict.ledger import LookAlpha
from quantkit.verdict.outcome import SignoffTest

__all__ = ["Evaluation", "evaluate_artifact", "evaluate_model", "gallery_info", "numerics_note",
           "recall_gallery"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """One candidate's evaluation on one split: its logits, metrics, paired test against FP32
    and, on backend=trt, the engine the numbers came from. Stages read these typed fields;
    ``evidence`` is what record.json keeps of it (metrics, slices, kernel census, numerics...)
    and nothing reads it but :meth:`to_record`.
    """

    name: str
    evidence: Mapping[str, object]
    logits: np.ndarray | PackedDetections  # a detector's decoded detections per example
    cached: bool = False
    split: str = "dev"
    test: SignoffTest | None = None  # vs FP32 on ``split`` (None for the reference itself)
    notes: tuple[str, ...] = ()  # what a reviewer must read about this evaluation (record.notes)
    gallery: np.ndarray | None = None  # embedding outputs: the recall@k gallery embedded by this model
    metrics: Mapping[str, float] = field(default_factory=dict)
    eval_seconds: float = 0.0
    engine: EngineFile | None = None  # backend=trt: the engine evaluated, else None

    @classmethod
    def of(cls, name: str, evidence: Mapping[str, object], logits: np.ndarray,
           **fields) -> "Evaluation":
        """An Evaluation whose typed fields are read once from ``evidence`` (the cached JSON)."""
        return cls(name=name, evidence=evidence, logits=logits,
                   metrics=dict(evidence.get("metrics") or {}),  # type: ignore[arg-type]
                   eval_seconds=float(evidence.get("eval_seconds") or 0.0),  # type: ignore[arg-type]
                   engine=EngineFile.from_record(evidence.get("engine")),  # type: ignore[arg-type]
                   **fields)

    def verdict_dict(self) -> dict | None:
        """The paired test as the record writes it (``verdict``), or None for the reference."""
        return None if self.test is None else {**self.test.to_verdict_dict(), "split": self.split}

    def metric(self, name: str) -> float:
        return self.metrics[name]

    def to_record(self) -> dict:
        verdict = self.verdict_dict()
        return {**self.evidence, **({"verdict": verdict} if verdict is not None else {})}


def evaluate_model(ctx: RunContext, name: str, path, *, split: str = "dev",
             reference: Evaluation | None = None, plan_int8: list[str] | None = None,
             plan_fp8: list[str] | None = None,
             emulated: onnx.ModelProto | Callable[[], onnx.ModelProto] | bool | None = None,
             artifact_sha: str | None = None, look: LookAlpha | None = None,
             build: Callable[[], tuple[str, onnx.ModelProto | None]] | None = None,
             samples: bool = True) -> Evaluation:
    """Evidence of the artifact at ``path`` on ``split`` (cached), with its paired test
    against ``reference`` (the FP32 evaluation of the same split).

    A paired test on the **test** split is a decision: it needs ``look``, the
    :class:`~quantkit.verdict.ledger.LookAlpha` the persistent ledger reserved for it
    (:func:`quantkit.run.stages.signoff.signoff`), and runs at that look's alpha. Without one it
    is refused (TestSplitReuse), cached test outputs included: no silent re-decision.

    ``plan_int8`` / ``plan_fp8``: the nodes planned INT8 / FP8, checked against the TensorRT
    engine's layers on backend=trt. ``emulated``: the artifact's FP16 emulation (a ModelProto or a zero-argument callable
    building it), whose numbers stand for the artifact on ONNX Runtime CPU;
    ``artifact_sha``: the file's sha256 when known (else computed); ``build``: writes the
    artifact on a cache miss only and returns its path and FP16 emulation (``path`` names it and ``artifact_sha`` is required:
    a cached evaluation needs no file; ``emulated`` then says whether it will have an FP16
    emulation). ``samples``: a detector's grid of its largest disagreements with FP32 is drawn
    (run/detection_samples.py; not for the search's intermediate sets).
    """
    s = ctx.settings
    if reference is not None and reference.split != split:
        raise ValueError(f"reference evaluated on {reference.split}, candidate on {split}")
    if split == "test" and reference is not None and look is None:
        raise TestSplitReuse("a decision on the test split outside the persistent test ledger",
                             where=f"evaluate({name}, split=test)", value=name,
                             fix="sign off through quantkit.run.stages.signoff.signoff: each look is "
                                 "recorded and charged in the ledger")
    # the artifact's bytes decide its evidence, not its name: calibrators whose searched
    # ranges converged write byte-identical files, evaluated once (the file name is set below)
    role = name if name in ("fp32", "fp16") else "candidate"
    # the plan is read only where an engine's layers are checked against it (backend=trt):
    # elsewhere the search's evaluation of its final FP16 set is the mixed candidate's
    checked = s.backend.name == "trt"
    inputs = {"name": role, "artifact": artifact_sha or sha256_file(path),
              "model": ctx.model.sha256,
              "emulated": bool(emulated) if build is not None else emulated is not None,
              "split": split, "data": ctx.split(split).sha256,
              "reference": reference is not None, "qdq_mode": ctx.qdq_mode(),
              "backend": asdict(s.backend), "seed": s.seed,
              "max_length": s.data.max_length,
              "plan_int8": (plan_int8 or []) if checked else [],
              **ctx.feeds_key(), **ctx.measured_key()}
    if plan_fp8 and checked:  # FP8 plans only: INT8 evaluations keep their cache keys
        inputs["plan_fp8"] = list(plan_fp8)
    gallery = recall_gallery(ctx)
    if gallery is not None:  # embedding outputs only: logit runs keep their cache keys
        inputs["gallery"] = gallery.sha256

    def compute():
        target = path
        if build is not None:
            target, em = build()
        else:
            em = emulated() if callable(emulated) else emulated
        evidence, logits, gallery_out = _evaluate(ctx, name, target, split=split,
                                                  reference=reference, plan_int8=plan_int8,
                                                  plan_fp8=plan_fp8, emulated=em,
                                                  gallery=gallery)
        if isinstance(logits, PackedDetections):
            return evidence, logits.arrays()
        return evidence, {"logits": logits,
                          **({"gallery": gallery_out} if gallery_out is not None else {})}

    evidence, arrays, hit = ctx.cached("evaluation", inputs, compute)
    if is_detection(ctx):
        logits, gallery_out = PackedDetections.from_arrays(arrays), None
    else:
        logits, gallery_out = arrays["logits"], arrays.get("gallery")
    evidence = {**evidence, "split": split, "artifact": Path(path).name}
    test = None
    if reference is not None and is_detection(ctx):  # the grid of largest disagreements
        if samples:
            evidence["detection"] = {**evidence["detection"],  # type: ignore[dict-item]
                                     "samples": draw_samples(ctx, name, split,
                                                             reference.logits, logits)}
        test = candidate_test(ctx, split, reference.logits, logits, name=name,
                              alpha=None if look is None else look.alpha)
    elif reference is not None:
        info = gallery_info(ctx, gallery)
        evidence.update(label_free_evidence(ctx, evidence, reference.logits, logits,
                                            split=split, ref_gallery=reference.gallery,
                                            gallery=gallery_out, info=info))
        test = candidate_test(ctx, split, reference.logits, logits, name=name,
                              alpha=None if look is None else look.alpha,
                              ref_gallery=reference.gallery, gallery=gallery_out,
                              gallery_info=info)
    return Evaluation.of(name, evidence, logits, cached=hit, split=split, test=test,
                         gallery=gallery_out)


def recall_gallery(ctx: RunContext):
    """The fixed recall@k gallery (``quantkit.data.gallery``) for embedding outputs, else
    None (and None when the train split it is drawn from is empty)."""
    if getattr(ctx.model, "output_kind", "logits") != "embedding":
        return None

    return draw(ctx.splits, size=ctx.settings.verdict.gallery_size, seed=ctx.settings.seed)


def gallery_info(ctx: RunContext, gallery) -> dict | None:
    """What identifies the gallery in the record: size, sha256, where it came from."""
    if gallery is None:
        return None
    return {"size": len(gallery), "sha256": gallery.sha256, "source": "train",
            "requested": ctx.settings.verdict.gallery_size, "seed": ctx.settings.seed}


def label_free_evidence(ctx: RunContext, evidence: dict, ref_out: np.ndarray,
                        out: np.ndarray, *, split: str = "dev", ref_gallery=None,
                        gallery=None, info: dict | None = None) -> dict:
    """What a candidate's output says against FP32's without labels, added to the (cached)
    evidence: ``metrics`` gains kl and abs_logit (logits) or cosine and recall_at_k
    (embeddings), and embeddings get ``embedding_fp32``: the per-example cosine distribution
    (the report's histogram), recall@k of FP32's neighbours in the gallery
    (``ref_gallery`` / ``gallery``, identified by ``info``), top-1 neighbour agreement;
    logits get ``agreement_slices``: top-1 agreement with FP32 per slice value (class when
    labelled, FP32's predicted class, token-length bucket), the report's bars."""
    metrics = dict(evidence.get("metrics") or {})
    extra: dict = {}
    if getattr(ctx.model, "output_kind", "logits") == "embedding":
        k = ctx.settings.verdict.recall_k
        emb = embedding_evidence(ref_out, out, k=k, ref_gallery=ref_gallery,
                                 cand_gallery=gallery, gallery=info)
        metrics["cosine"] = emb["cosine"]["mean"]
        if f"recall_at_{k}" in emb:
            metrics["recall_at_k"] = emb[f"recall_at_{k}"]["mean"]
        extra["embedding_fp32"] = {**emb, "recall_k": k}
    elif "mean_kl_fp32" in evidence:
        metrics["kl"] = evidence["mean_kl_fp32"]
        metrics["abs_logit"] = evidence["mean_abs_logit_fp32"]
        ref_pred, pred = ref_out.argmax(axis=1), out.argmax(axis=1)
        y = ctx.split(split).labels
        slices = {**({"class": y} if y is not None else {}), "fp32_class": ref_pred,
                  **ctx.prepared_feeds().slices(ctx.split_lengths(split))}
        extra["agreement_slices"] = {  # slice_metrics' "accuracy" of pred vs FP32's pred
            s: {v: {"agreement": st["accuracy"], "n": st["n"]} for v, st in vals.items()}
            for s, vals in slice_metrics(ref_pred, pred, slices).items()}
    return {**extra, "metrics": metrics}


def _evaluate(ctx: RunContext, name: str, path, *, split: str, reference: Evaluation | None,
              plan_int8: list[str] | None, emulated, gallery=None,
              plan_fp8: list[str] | None = None
              ) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Task evidence of one artifact on ``split`` (+ agreement with ``reference``), its
    outputs, and (``gallery``: the recall@k gallery split) the gallery's outputs from the
    same session.

    On ONNX Runtime CPU, FP16 ops without CPU kernels run in FP32 between Casts that ORT
    inserts and partly removes, which flatters FP16. When ``emulated`` is given (the same
    plan with FP16 rounding at every FP16 tensor and FP32 compute) task numbers come from it,
    and the artifact itself is only loaded for the kernel census. On TensorRT the engine
    built from the artifact is evaluated directly.
    """
    s, splits = ctx.settings, ctx.splits
    data, lengths = ctx.split(split), ctx.split_lengths(split)
    labels = list(range(len(splits.label_names)))
    y = data.labels
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        t0 = time.perf_counter()
        engine = (build_trt_engine(ctx, path, plan_int8, plan_fp8) if s.backend.name == "trt"
                  else None)
        use_emulation = engine is None and emulated is not None
        if use_emulation:
            with ctx.runner(path, name=f"{name}-census", optimized_to=optimized,
                            qdq_mode="fused"):
                pass
        if engine is not None:
            runner = runner_for(s, engine, name=name)
        else:
            runner = ctx.runner(emulated if use_emulation else path, name=name,
                                optimized_to=None if use_emulation else optimized)
        with runner as r:
            if is_detection(ctx):
                logits = detect_split(ctx, r, data, desc=f"{split} {name}",
                                      progress=s.progress)
            else:
                logits = run_split(r, ctx.feeds, data, output=ctx.model.output_name,
                                   batch_size=s.backend.batch_size, progress=s.progress,
                                   desc=f"{split} {name}", lengths=lengths)
            gallery_out = None if gallery is None else run_split(
                r, ctx.feeds, gallery, output=ctx.model.output_name,
                batch_size=s.backend.batch_size, progress=s.progress,
                desc=f"gallery {name}")
        seconds = time.perf_counter() - t0
        census = kernel_census(optimized) if optimized.exists() else {}
    if is_detection(ctx):  # decoded detections; COCO metrics (run/detection.py)
        found = detection_evidence(ctx, split, logits,
                                   None if reference is None else reference.logits)
        return {"artifact": Path(path).name,
                "numerics": numerics_note(name, s, emulated=use_emulation,
                                          qdq_mode=ctx.qdq_mode()),
                "eval_seconds": round(seconds, 3), "n": int(len(logits)),
                "kernel_census": census, "backend": s.backend.name, **found,
                **({"engine": engine.to_record()} if engine is not None else {})}, \
            logits, None
    if getattr(ctx.model, "output_kind", "logits") == "embedding":
        # no classes: task metrics and agreement do not apply (label_free_evidence adds
        # cosine and recall@k outside the cache)
        return {"artifact": Path(path).name,
                "numerics": numerics_note(name, s, emulated=use_emulation,
                                          qdq_mode=ctx.qdq_mode()),
                "eval_seconds": round(seconds, 3), "n": int(len(logits)),
                "kernel_census": census, "backend": s.backend.name, "metrics": {},
                "output": {"name": ctx.model.output_name, "kind": "embedding",
                           "pooling": ctx.model.pooling, "dims": int(logits.shape[1])},
                **({"engine": engine.to_record()} if engine is not None else {})}, \
            logits, gallery_out
    pred = logits.argmax(axis=1)
    extra_slices = ctx.prepared_feeds().slices(lengths)  # text: token-count buckets
    ev = {"artifact": Path(path).name,
          "numerics": numerics_note(name, s, emulated=use_emulation, qdq_mode=ctx.qdq_mode()),
          "eval_seconds": round(seconds, 3), "n": int(len(pred)), "kernel_census": census,
          "backend": s.backend.name}
    if y is not None:  # label-free data: agreement with FP32 only
        ev["metrics"] = task_metrics(y, logits, labels=labels, label_names=splits.label_names)
        ev["slices"] = slice_metrics(y, pred, {"class": y, **extra_slices})
    else:
        ev["metrics"] = {}
    if engine is not None:
        ev["engine"] = engine.to_record()
    if reference is not None:
        ref_logits = reference.logits
        ref_pred = ref_logits.argmax(axis=1)
        ev["agreement_fp32"] = agreement(ref_pred, pred)
        ev["metrics"]["agreement"] = ev["agreement_fp32"]
        ev["mean_kl_fp32"] = mean_kl(ref_logits, logits)
        ev["mean_abs_logit_fp32"] = float(np.abs(ref_logits - logits).mean())
    return ev, logits, gallery_out


def numerics_note(name: str, settings, *, emulated: bool = False, qdq_mode: str = "fused") -> str:
    """One line for the record: how this candidate's numbers were computed (and, for INT8
    on ONNX Runtime, how its Q/DQ ran and on which CPU ISA that holds)."""
    note = _numerics_note(name, settings, emulated=emulated)
    if settings.backend.name != "trt" and name not in ("fp32", "fp16"):
        note += "; " + qdq_mode_note(qdq_mode, cpu_isa())
    return note


def _numerics_note(name: str, settings, *, emulated: bool = False) -> str:
    if settings.backend.name == "trt":
        return engine_numerics_note(name, settings)
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
                f"at every FP16 tensor (ORT CPU lacks FP16 kernels); disabled "
                f"optimizers: {off}. Kernel census from the artifact itself")
    return f"{what} on ONNX Runtime {prov} (disabled optimizers: {off})"


def evaluate_artifact(ctx: RunContext, artifact, reference: Evaluation, *,
                      plan_int8: bool = True) -> Evaluation:
    """:func:`evaluate_model` of a built Artifact against the FP32 reference, on the reference's
    split (``plan_int8=False``: do not check the engine's INT8 layers against the plan, as
    for a search step)."""
    return evaluate_model(ctx, artifact.name, artifact.path, split=reference.split,
                          reference=reference,
                    plan_int8=artifact.plan.int8_nodes() if plan_int8 else None,
                    plan_fp8=artifact.plan.nodes_with("fp8") if plan_int8 else None,
                    emulated=artifact.emulated, artifact_sha=artifact.sha256)
