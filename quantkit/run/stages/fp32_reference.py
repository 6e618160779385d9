"""Stage "fp32_reference": the FP32 model's outputs and task evidence on dev (what every choice
compares against) and on test (the sign-off's pairs)."""

from __future__ import annotations

import dataclasses
import logging

from quantkit.data.checks import chance_level_note
from quantkit.run.context import RunContext
from quantkit.run.detection import check_reference, is_detection
from quantkit.run.evaluation import Evaluation, evaluate_model

__all__ = ["fp32_reference"]

log = logging.getLogger(__name__)


def fp32_reference(ctx: RunContext, split: str = "dev") -> Evaluation:
    """The FP32 model's evidence on ``split``: what every paired test on it compares against."""
    ev = evaluate_model(ctx, "fp32", ctx.model.path, split=split, artifact_sha=ctx.model.sha256)
    if is_detection(ctx):  # label-free: FP32's own boxes must give a ground truth
        check_reference(ctx, split, ev.logits)
    note = chance_level_note(ev.metrics.get("accuracy"), ctx.splits.label_names, split=split)
    if note:
        log.warning("%s", note)
        ev = dataclasses.replace(ev, notes=(*ev.notes, note))
    return ev
