"""Stage "backend_check": the artifact as the backend runs it vs the execution its numbers
come from (the FP16 emulation with exact Q/DQ), on a dev subset, gated by the margin.

Two executions of one plan that flip a fraction ``f`` of predictions can differ in accuracy
by up to ``f``, so the tolerance is a share of the sign-off margin
(``compare.numerics_margin_share``, quantkit/compare/numerics.py), tested with an exact
binomial bound. The numerics noise between two equivalent executions of the emulation
(exact Q/DQ vs integer-exact kernels) is reported beside it: when it is above the tolerance,
accuracy measured on this CPU does not transfer to another runtime and a TensorRT
evaluation is required.

On ``backend=trt`` the artifact side is the TensorRT engine and the gate decides whether the
candidate may be recommended. On ONNX Runtime CPU with ``target=tensorrt`` the artifact side
is ORT's own execution (which drops FP16 Casts and fuses integer kernels): the gate is
reported, and a failure says the CPU numbers need a TensorRT evaluation."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from quantkit.run.artifacts import Artifact
from quantkit.run.context import RunContext

__all__ = ["BackendCheck", "check_backend"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendCheck:
    """``result``: checked, n, agreement, accuracy per side, the gate (what the record shows)."""

    result: dict

    @property
    def ok(self) -> bool:
        return bool(self.result.get("ok", True))

    @property
    def blocks(self) -> bool:
        """True when the gate failed on the runtime the candidate deploys to (backend=trt)."""
        return bool(self.result.get("blocks_recommendation", False))

    @property
    def tensorrt_required(self) -> bool:
        return bool((self.result.get("gate") or {}).get("tensorrt_required", False))

    def to_record(self) -> dict:
        return dict(self.result)


def check_backend(ctx: RunContext, artifact: Artifact, reference) -> BackendCheck:
    """Cached by artifact, dev data, compare + backend + verdict settings and the execution
    environment. ``reference``: the FP32 evaluation on dev (its accuracy sets the margin)."""
    s = ctx.settings
    inputs = {"artifact": artifact.sha256, "dev": ctx.splits.dev.sha256,
              "compare": asdict(s.compare), "backend": asdict(s.backend),
              "verdict": [s.verdict.margin_kind, s.verdict.margin, s.verdict.alpha,
                          *([s.verdict.min_cosine, s.verdict.min_agreement]
                            if _embedding(ctx) else [])],
              "qdq_mode": ctx.qdq_mode(), **ctx.feeds_key(), **ctx.measured_key()}
    obj, _, _ = ctx.cached("backend_check", inputs,
                           lambda: (_check(ctx, artifact, reference), None))
    return BackendCheck(result=obj)


def _margin_abs(ctx: RunContext, reference) -> float:
    from quantkit.verdict import Margin, margin_abs

    v = ctx.settings.verdict
    if ctx.splits.label_free or v.metric not in ("accuracy", "macro_f1") or _embedding(ctx):
        return 1.0 - v.min_agreement
    return margin_abs(Margin(v.margin_kind, v.margin), reference.metric("accuracy"))


def _embedding(ctx: RunContext) -> bool:
    return getattr(ctx.model, "output_kind", "logits") == "embedding"


def _differ(ctx: RunContext, a, b):
    """Per example: the two executions disagree (top-1 for logits; for embeddings, cosine
    between them below ``verdict.min_cosine``)."""
    if _embedding(ctx):
        from quantkit.compare.embedding import cosine_per_example

        return cosine_per_example(a, b) < ctx.settings.verdict.min_cosine
    return a.argmax(axis=1) != b.argmax(axis=1)


def _check(ctx: RunContext, art: Artifact, reference) -> dict:
    from quantkit.backends.batched import run_split
    from quantkit.compare.numerics import numerics_gate

    s, dev = ctx.settings, ctx.splits.dev
    n = min(s.compare.backend_check_subset, len(dev))
    on_trt = s.backend.name == "trt"
    if n == 0 or (art.emulated is None and not on_trt):
        return {"checked": False}
    sub, lengths = ctx.head(dev, n), ctx.split_lengths("dev", n)

    def predict(runner) -> object:
        with runner as r:
            return run_split(r, ctx.feeds, sub, output=ctx.model.output_name,
                             batch_size=s.backend.batch_size, progress=False,
                             lengths=lengths)

    emulated = art.emulated() if art.emulated is not None else art.path
    if on_trt:
        from quantkit.backends.trt.run import runner_for
        from quantkit.run.engine import build_trt_engine

        engine = build_trt_engine(ctx, art.path, None)
        artifact_side = predict(runner_for(s, engine, name="check-engine"))
        what = "TensorRT engine vs the emulation of the same plan"
    else:
        artifact_side = predict(ctx.runner(art.path, name="check-artifact", qdq_mode="fused"))
        what = "artifact as ONNX Runtime runs it (fused kernels) vs the emulation"
    reference_side = predict(ctx.runner(emulated, name="check-emulated"))
    flips = int(_differ(ctx, artifact_side, reference_side).sum())
    noise = None
    if art.plan.int8_nodes() and ctx.qdq_mode() == "exact":  # two equivalent executions
        noise_side = predict(ctx.runner(emulated, name="check-noise", qdq_mode="integer"))
        noise = int(_differ(ctx, noise_side, reference_side).sum())
    gate = numerics_gate(flips / n, n, _margin_abs(ctx, reference),
                         noise_flip_rate=None if noise is None else noise / n,
                         share=s.compare.numerics_margin_share, alpha=s.verdict.alpha / 2,
                         what=what, noise_what="exact Q/DQ vs integer-exact kernels")
    out = {"checked": True, "n": n, "agreement": 1.0 - flips / n, "compared": what,
           "gate": gate.to_dict(), "ok": gate.status != "fail",
           "blocks_recommendation": on_trt and gate.status == "fail"}
    if _embedding(ctx):
        out["compared_by"] = (f"examples whose embeddings differ (cosine below "
                              f"verdict.min_cosine={ctx.settings.verdict.min_cosine:g})")
    y = sub.labels
    if y is not None and not _embedding(ctx):
        out["accuracy"] = {"artifact": float((artifact_side.argmax(axis=1) == y).mean()),
                           "emulated": float((reference_side.argmax(axis=1) == y).mean())}
    if gate.status == "fail" or gate.tensorrt_required:
        log.warning("backend check of %s: %s", art.name, " ".join(gate.reasons))
    return out
