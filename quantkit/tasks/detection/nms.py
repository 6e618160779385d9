"""Greedy non-maximum suppression, class-wise (or class-agnostic), vectorized in numpy.

Greedy NMS keeps a box when no *kept* box of the same class with a higher score overlaps it
by more than ``iou_threshold``. That is a recursion over the score order, usually written as
a Python loop over kept boxes. Here it is solved as the fixed point of one matrix step: with
``S[i, j]`` = "box i ranks above box j and IoU(i, j) > threshold",

    keep_{t+1}[j] = not any_i (keep_t[i] and S[i, j]),    keep_0 = all boxes.

After t steps the first t boxes of the score order have their greedy status (box j's status
depends only on boxes above it), so the iteration reaches the greedy answer, and it stops at
the first repeated state, the unique fixed point (box 0 is kept; each later box is then
determined by those above it). In practice a handful of steps: the depth of the longest chain
of suppressions, not the number of boxes. One loop over the classes present, none per box.

Ties in score keep the input order (stable sort), as ``torchvision.ops.batched_nms``.
"""

from __future__ import annotations

import numpy as np

from quantkit.tasks.detection.boxes import iou_matrix

__all__ = ["nms", "greedy_keep"]


def greedy_keep(boxes: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Boolean keep mask of greedy NMS over ``boxes`` [N, 4] already sorted by score, highest
    first (module docstring)."""
    n = boxes.shape[0]
    if n <= 1:
        return np.ones(n, dtype=bool)
    suppress = iou_matrix(boxes, boxes) > iou_threshold
    suppress &= np.triu(np.ones((n, n), dtype=bool), k=1)  # only a higher-ranked box suppresses
    if not suppress.any():
        return np.ones(n, dtype=bool)
    s = suppress.astype(np.float32)
    keep = np.ones(n, dtype=bool)
    for _ in range(n + 1):  # at most n steps (module docstring); typically a few
        new = (keep.astype(np.float32) @ s) == 0
        if np.array_equal(new, keep):
            return keep
        keep = new
    return keep  # unreachable: n steps fix every box


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, *, iou_threshold: float,
        max_det: int | None = None, agnostic: bool = False,
        per_class_candidates: int | None = None, per_class_max: int | None = None
        ) -> np.ndarray:
    """Indices of the boxes greedy NMS keeps, highest score first.

    ``boxes`` [N, 4] x1, y1, x2, y2; ``scores`` [N]; ``classes`` [N] int. Class-wise unless
    ``agnostic``. ``per_class_candidates``: only each class's top-k scores enter NMS (PicoDet's
    and rapid-layout's ``candidate_size``); ``per_class_max``: at most k kept per class
    (rapid-layout's ``keep_top_k``); ``max_det``: at most k kept in all (highest scores).
    """
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float32).reshape(-1)
    classes = np.asarray(classes, dtype=np.int64).reshape(-1)
    n = scores.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    group = np.zeros(n, dtype=np.int64) if agnostic else classes
    # by group, then score (highest first), then input order
    order = np.lexsort((np.arange(n), -scores.astype(np.float64), group))
    g_sorted = group[order]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    ends = np.r_[starts[1:], n]
    kept = []
    for a, b in zip(starts, ends):  # one step per class present
        idx = order[a:b]
        if per_class_candidates is not None:
            idx = idx[:per_class_candidates]
        k = idx[greedy_keep(boxes[idx], iou_threshold)]
        if per_class_max is not None:
            k = k[:per_class_max]
        kept.append(k)
    keep = np.concatenate(kept)
    keep = keep[np.lexsort((keep, -scores[keep].astype(np.float64)))]
    if max_det is not None:
        keep = keep[:max_det]
    return keep.astype(np.int64)
