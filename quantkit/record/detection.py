"""``candidate.detection``: a detector's evidence on its split (quantkit/run/detection.py)
behind the scalar metrics, which ``candidate.metrics`` alone holds (mAP, mAP@.5, mAP@.75
against the labels; ``*_vs_fp32``, ``recall50_fp32``, ``mean_iou_fp32`` against FP32's
detections): per class, per object size and the precision-recall curves against the labels;
for a candidate, the same against FP32's detections as ground truth (``vs_fp32``); and the
sample images where the candidate disagrees most with FP32 (``samples``:
quantkit/run/detection_samples.py). Values the evaluator leaves undefined (a class without
ground truth) are null."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.record.serde import optional

__all__ = ["ClassAP", "DetectionRecord", "DetectionSamples", "DetectionVsFp32", "SampleImage"]


@dataclass
class ClassAP:
    """One class's AP@[.5:.95] and AP@.5 and its ground-truth boxes."""

    ap: float | None
    ap50: float | None
    n_gt: int


@dataclass(kw_only=True)
class DetectionVsFp32:
    """The candidate scored against FP32's detections (score >= ``gt_score_min``): AP per
    class and the PR curves (its mAP, recall and mean IoU: ``candidate.metrics``)."""

    n_reference_boxes: int
    gt_score_min: float
    per_class: dict[str, ClassAP]
    pr50: list[float | None]
    pr: list[float | None]


@dataclass
class SampleImage:
    """One drawn image: its file, ``1 - F1`` against FP32 and both models' boxes."""

    file: str
    disagreement: float
    fp32_boxes: int
    candidate_boxes: int


@dataclass
class DetectionSamples:
    """The grid of the largest disagreements (``grid``: a PNG in the run dir)."""

    grid: str | None
    score_min: float
    mean_disagreement: float
    images: list[SampleImage]


@dataclass(kw_only=True)
class DetectionRecord:
    """A detector's evidence on one split (module docstring); the labelled keys are written
    only with labels, ``vs_fp32`` / ``samples`` only for a candidate."""

    labelled: bool
    n_images: int
    n_detections: int
    per_class: dict[str, ClassAP] | None = optional()
    per_size: dict[str, float | None] | None = optional()
    n_gt: int | None = optional()
    pr50: list[float | None] | None = optional()
    pr: list[float | None] | None = optional()
    vs_fp32: DetectionVsFp32 | None = optional()
    samples: DetectionSamples | None = optional()
