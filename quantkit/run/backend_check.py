"""Stage "backend_check": the artifact as the backend runs it vs its faithful FP16 emulation.

Agreement far below 1 (or a large accuracy gap) means the backend mis-ran the artifact (e.g.
ORT 1.32's WeightBiasQuantization on FP16 Q/DQ graphs scored 0.25 instead of 0.82), so the
emulated numbers, not the backend's, are the ones to trust."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from quantkit.run.artifacts import Artifact
from quantkit.run.context import RunContext

__all__ = ["BackendCheck", "check_backend"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackendCheck:
    """``result``: checked, n, agreement, accuracy per side, ok (what the record shows)."""

    result: dict

    @property
    def ok(self) -> bool:
        return bool(self.result.get("ok", True))

    def to_record(self) -> dict:
        return dict(self.result)


def check_backend(ctx: RunContext, artifact: Artifact) -> BackendCheck:
    """Cached by artifact, eval data, compare + backend settings and execution environment."""
    s = ctx.settings
    inputs = {"artifact": artifact.sha256, "eval": ctx.splits.eval.sha256,
              "compare": asdict(s.compare), "backend": asdict(s.backend), **ctx.feeds_key(),
              **ctx.measured_key()}
    obj, _, _ = ctx.cached("backend_check", inputs, lambda: (_check(ctx, artifact), None))
    return BackendCheck(result=obj)


def _check(ctx: RunContext, art: Artifact) -> dict:
    from quantkit.backends.batched import run_split

    s, ev = ctx.settings, ctx.splits.eval
    n = min(s.compare.backend_check_subset, len(ev))
    if n == 0 or art.emulated is None:
        return {"checked": False}
    sub, y = ctx.head(ev, n), ev.labels[:n]
    lengths = ctx.eval_lengths[:n] if ctx.eval_lengths is not None else None
    preds = {}
    for key, m in (("artifact", art.path), ("emulated", art.emulated())):
        with ctx.runner(m, name=f"check-{key}") as r:
            preds[key] = run_split(r, ctx.feeds, sub, output=ctx.model.output_name,
                                   batch_size=s.backend.batch_size, progress=False,
                                   lengths=lengths).argmax(axis=1)
    agree = float((preds["artifact"] == preds["emulated"]).mean())
    acc = {k: float((v == y).mean()) for k, v in preds.items()}
    gap = abs(acc["artifact"] - acc["emulated"])
    ok = (agree >= s.compare.backend_check_min_agreement
          and gap <= s.compare.backend_check_max_accuracy_gap)
    if not ok:
        log.warning("backend check: %s as ONNX Runtime runs it agrees with its FP16 emulation on "
                    "%.3f of %d examples (accuracy gap %.3f): the backend may mis-run this graph",
                    art.path, agree, n, gap)
    return {"checked": True, "n": n, "agreement": agree, "accuracy": acc, "ok": ok,
            "compared": "artifact on the backend vs FP16 emulation of the same plan"}
