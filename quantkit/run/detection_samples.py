"""The report's grid of sample images: where a candidate's detections differ most from
FP32's, with both drawn.

Per image, the disagreement is ``1 - F1`` of the candidate's detections against FP32's (both
at or above ``model.output.gt_score_min``; a match is the same class at IoU >= 0.5, greedy by
score): 0 when every box is found again, 1 when none is. The images with the largest
disagreement (ties: the split's order) are drawn into one PNG, FP32's boxes in green and the
candidate's in red, written to ``<run_dir>/detections/<split>_<candidate>.png``; the record
keeps the file's name and each image's numbers (the report reads them, computes nothing).
"""

from __future__ import annotations

import io
import logging

import numpy as np
from PIL import Image, ImageDraw

from quantkit.fsutil import atomic_write_bytes
from quantkit.run.context import RunContext
from quantkit.tasks.detection.boxes import Detections, iou_matrix
from quantkit.tasks.detection.packed import PackedDetections

__all__ = ["disagreement", "draw_samples", "N_SAMPLES", "CELL_WIDTH"]

log = logging.getLogger(__name__)

#: images drawn per candidate, and the width of each in the grid (pixels)
N_SAMPLES = 6
CELL_WIDTH = 320
FP32_COLOUR, CANDIDATE_COLOUR = (0, 160, 0), (220, 0, 0)


def _matched(ref: Detections, cand: Detections) -> int:
    """Same-class pairs at IoU >= 0.5, greedy by the candidate's score."""
    found = 0
    for c in np.union1d(ref.classes, cand.classes):
        r, k = ref.boxes[ref.classes == c], cand.boxes[cand.classes == c]
        if not len(r) or not len(k):
            continue
        order = np.argsort(-cand.scores[cand.classes == c], kind="stable")
        iou = iou_matrix(k[order], r)
        free = np.ones(len(r), bool)
        for row in iou:
            row = np.where(free, row, -1.0)
            j = int(row.argmax())
            if row[j] >= 0.5:
                free[j] = False
                found += 1
    return found


def disagreement(ref: Detections, cand: Detections, score_min: float) -> float:
    """``1 - F1`` of ``cand`` against ``ref`` (module docstring); 0 when neither has a box."""
    r, c = ref.above(score_min), cand.above(score_min)
    total = len(r) + len(c)
    return 0.0 if total == 0 else float(1.0 - 2.0 * _matched(r, c) / total)


def _draw(image: np.ndarray, ref: Detections, cand: Detections, caption: str):
    im = Image.fromarray(image)
    scale = CELL_WIDTH / im.width
    im = im.resize((CELL_WIDTH, max(1, round(im.height * scale))), Image.Resampling.BILINEAR)
    d = ImageDraw.Draw(im)
    for dets, colour, width in ((ref, FP32_COLOUR, 3), (cand, CANDIDATE_COLOUR, 1)):
        for b in dets.boxes * scale:
            d.rectangle([float(v) for v in b], outline=colour, width=width)
    d.rectangle([0, 0, CELL_WIDTH, 14], fill=(255, 255, 255))
    d.text((2, 1), caption, fill=(0, 0, 0))
    return im


def draw_samples(ctx: RunContext, name: str, split: str, ref: PackedDetections,
                 cand: PackedDetections) -> dict:
    """Draw the grid of ``name``'s largest disagreements with FP32 on ``split`` (module
    docstring); returns what the record keeps of it."""
    data = ctx.split(split)
    score_min = ctx.settings.model.output.gt_score_min
    scores = np.array([disagreement(ref.image(i), cand.image(i), score_min)
                       for i in range(len(ref))])
    order = np.argsort(-scores, kind="stable")[:N_SAMPLES]
    images, cells = [], []
    for i in order.tolist():
        r, c = ref.image(i).above(score_min), cand.image(i).above(score_min)
        images.append({"file": data.files[i].name, "disagreement": float(scores[i]),
                       "fp32_boxes": len(r), "candidate_boxes": len(c)})
        cells.append(_draw(data.read(i), r, c, f"{data.files[i].name}  1-F1 {scores[i]:.2f}"))
    rel = f"detections/{split}_{name}.png"
    if cells:
        h = max(cell.height for cell in cells)
        cols = min(3, len(cells))
        rows = -(-len(cells) // cols)
        grid = Image.new("RGB", (cols * CELL_WIDTH, rows * h), (255, 255, 255))
        for k, cell in enumerate(cells):
            grid.paste(cell, ((k % cols) * CELL_WIDTH, (k // cols) * h))
        buf = io.BytesIO()
        grid.save(buf, format="PNG")
        (ctx.run_dir / "detections").mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(ctx.run_dir / rel, buf.getvalue())
    return {"grid": rel if cells else None, "score_min": float(score_min),
            "mean_disagreement": float(scores.mean()) if scores.size else 0.0,
            "images": images}
