"""Detections as values: per image, boxes (x1, y1, x2, y2 in pixels), scores and class ids;
box conversions and IoU. numpy only."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Detections", "cxcywh_to_xyxy", "iou_matrix", "empty_detections"]


@dataclass(frozen=True)
class Detections:
    """One image's detections: ``boxes`` float32 [N, 4] x1, y1, x2, y2 (pixels of the image
    they refer to), ``scores`` float32 [N], ``classes`` int64 [N] (0-based class index),
    highest score first."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __post_init__(self) -> None:
        b = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        s = np.asarray(self.scores, dtype=np.float32).reshape(-1)
        c = np.asarray(self.classes, dtype=np.int64).reshape(-1)
        if not (b.shape[0] == s.shape[0] == c.shape[0]):
            raise ValueError(f"detections of unequal length: boxes {b.shape}, scores "
                             f"{s.shape}, classes {c.shape}")
        object.__setattr__(self, "boxes", b)
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "classes", c)

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def take(self, index: np.ndarray) -> "Detections":
        return Detections(self.boxes[index], self.scores[index], self.classes[index])

    def above(self, score_min: float) -> "Detections":
        """The detections scoring at least ``score_min``."""
        return self.take(np.flatnonzero(self.scores >= score_min))


def empty_detections() -> Detections:
    return Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32),
                      np.zeros(0, np.int64))


def cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    """[..., 4] centre x, centre y, width, height -> x1, y1, x2, y2."""
    cx, cy, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (x1, y1, x2, y2;
    areas without the +1 pixel convention) as float64 [N, M]; 0 where the union is empty."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0.0, None)
    inter = wh[..., 0] * wh[..., 1]
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
