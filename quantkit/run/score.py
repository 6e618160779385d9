"""The recipe score: how far a quantized graph's outputs are from FP32's on a dev subset, one
low-noise number a choice on dev can rank by (mean KL for logits, 1 - mean cosine for
embeddings, 1 - mAP vs FP32's detections for a detector; lower is better). The recipe trials,
the FP8 weight rounding and (detectors) the search's measured damage choose by it."""

from __future__ import annotations

import numpy as np

from quantkit.backends.batched import run_split
from quantkit.compare.embedding import cosine_per_example
from quantkit.compare.task import mean_kl
from quantkit.run.context import RunContext
from quantkit.run.detection import detect_split, detection_score, is_detection

__all__ = ["subset_score"]


def subset_score(ctx: RunContext, model, sub, ref, *, name: str = "recipe-trial") -> float:
    """The recipe score of the Q/DQ graph ``model`` (FP16 remainder emulated) on the dev
    subset ``sub`` against the FP32 outputs ``ref``: mean KL(FP32 || candidate) for logits,
    1 - mean cosine for embeddings, 1 - mAP@[.5:.95] against FP32's detections for a
    detector (lower is better)."""
    with ctx.runner(model, name=name) as r:
        if is_detection(ctx):
            return detection_score(ctx, sub, ref, detect_split(ctx, r, sub))
        out = run_split(r, ctx.feeds, sub, output=ctx.model.output_name,
                        batch_size=ctx.settings.backend.batch_size, progress=False)
    if ctx.model.output_kind == "embedding":
        return float(1.0 - np.mean(cosine_per_example(ref, out)))
    return float(mean_kl(ref, out))
