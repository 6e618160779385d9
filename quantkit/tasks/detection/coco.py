"""COCO mAP from pycocotools, and the per-image match tables the mAP bootstrap recombines.

* :func:`evaluate` runs ``COCOeval`` (bbox) on labels and detections: mAP@[.5:.95], mAP@.5,
  mAP@.75, AP per class, AP per object size (small < 32^2, medium, large > 96^2 pixels of
  area, COCO's ranges) and a :class:`~quantkit.verdict.map_bootstrap.MatchTable` for the
  'all' area range at maxDets 100 (the evaluator's own matching, read from ``evalImgs``).
* :func:`evaluate_label_free`: the candidate's detections scored against FP32's detections
  (those at or above ``gt_score_min``) as ground truth: mAP vs FP32, the recall of FP32's
  boxes at IoU 0.5 (a same-class candidate box matched by the evaluator) and the mean IoU of
  those matches.

The AP is the evaluator's (``accumulate`` / ``summarize``), never computed here. Image ids are
1..N in the order of the labels, categories 1..C for the model's classes 0..C-1 (an id of 0
would read as "unmatched" in ``evaluateImg``'s tables). pycocotools' progress prints are
swallowed.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from quantkit.errors import DataError
from quantkit.tasks.detection.boxes import Detections
from quantkit.tasks.detection.labels import BoxLabels
from quantkit.verdict.map_bootstrap import MatchTable

__all__ = ["DetectionMetrics", "LabelFreeMetrics", "coco_ground_truth", "coco_results",
           "cocoeval", "evaluate", "evaluate_label_free", "match_table", "pseudo_labels"]

AREA_NAMES = ("all", "small", "medium", "large")


def _quiet():
    return contextlib.redirect_stdout(io.StringIO())


def coco_ground_truth(labels: BoxLabels, order: Sequence[int] | None = None) -> dict:
    """COCO dataset dict of ``labels`` (images 1..N in ``order``, default all in order)."""
    idx = range(len(labels)) if order is None else [int(i) for i in order]
    images, anns = [], []
    for new_id, i in enumerate(idx, start=1):
        images.append({"id": new_id, "file_name": labels.file_names[i],
                       "height": int(labels.heights[i]), "width": int(labels.widths[i])})
        for b, c in zip(labels.boxes[i].astype(np.float64), labels.classes[i]):
            w, h = float(b[2] - b[0]), float(b[3] - b[1])
            anns.append({"id": len(anns) + 1, "image_id": new_id, "category_id": int(c) + 1,
                         "bbox": [float(b[0]), float(b[1]), w, h], "area": w * h,
                         "iscrowd": 0})
    cats = [{"id": k + 1, "name": n} for k, n in enumerate(labels.class_names)]
    return {"images": images, "annotations": anns, "categories": cats}


def coco_results(detections: Sequence[Detections], order: Sequence[int] | None = None
                 ) -> list[dict]:
    """Detections as COCO results (image ids 1..N in ``order``), the fields ``loadRes``
    would add (area w*h, ids from 1, iscrowd 0) already set."""
    idx = range(len(detections)) if order is None else [int(i) for i in order]
    out = []
    for new_id, i in enumerate(idx, start=1):
        d = detections[i]
        b = d.boxes.astype(np.float64)
        for (x1, y1, x2, y2), s, c in zip(b, d.scores.astype(np.float64), d.classes):
            w, h = x2 - x1, y2 - y1
            out.append({"id": len(out) + 1, "image_id": new_id, "category_id": int(c) + 1,
                        "bbox": [x1, y1, w, h], "area": w * h, "score": float(s),
                        "iscrowd": 0})
    return out


def cocoeval(gt: dict, results: list[dict]) -> Any:
    """An evaluated and accumulated ``pycocotools.cocoeval.COCOeval`` (bbox)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with _quiet():
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = COCO()
        coco_dt.dataset = {"images": gt["images"], "categories": gt["categories"],
                           "annotations": results}
        coco_dt.createIndex()
        ev = COCOeval(coco_gt, coco_dt, iouType="bbox")
        ev.params.imgIds = [im["id"] for im in gt["images"]]
        ev.params.catIds = [c["id"] for c in gt["categories"]]
        ev.evaluate()
        ev.accumulate()
    return ev


def _mean_over(x: np.ndarray, axis: int) -> np.ndarray:
    """The mean of the entries > -1 (the evaluator's "valid") along ``axis``; NaN where
    there is none."""
    ok = x > -1
    n = ok.sum(axis=axis)
    total = np.where(ok, x, 0.0).sum(axis=axis)
    return np.divide(total, n, out=np.full(total.shape, np.nan), where=n > 0)


def _mean_valid(x: np.ndarray) -> float:
    v = x[x > -1]
    return float(v.mean()) if v.size else float("nan")


@dataclass(frozen=True)
class DetectionMetrics:
    """COCO metrics of one model's detections (labelled, or against FP32's detections)."""

    map: float
    map50: float
    map75: float
    per_class: dict[str, dict[str, float | int]]
    per_size: dict[str, float]
    n_images: int
    n_gt: int
    n_detections: int
    table: MatchTable = field(repr=False)
    # the precision-recall curve at COCO's 101 recall points (mean over the classes with
    # ground truth; NaN where no class reaches that recall): at IoU 0.5, and averaged over
    # IoU 0.5:0.95
    pr50: tuple[float, ...] = field(default=(), repr=False)
    pr: tuple[float, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        def num(v):
            return None if isinstance(v, float) and not np.isfinite(v) else v
        return {"map": num(self.map), "map50": num(self.map50), "map75": num(self.map75),
                "per_class": {k: {a: num(b) for a, b in v.items()}
                              for k, v in self.per_class.items()},
                "per_size": {k: num(v) for k, v in self.per_size.items()},
                "n_images": self.n_images, "n_gt": self.n_gt,
                "n_detections": self.n_detections,
                "pr50": [num(float(v)) for v in self.pr50],
                "pr": [num(float(v)) for v in self.pr]}


def match_table(ev: Any, n_classes: int, area: str = "all", max_det: int = 100) -> MatchTable:
    """The evaluator's per-image matches (``ev.evalImgs`` after ``evaluate()``) for one area
    range at ``max_det``, in ``accumulate``'s order (module docstring of
    :mod:`quantkit.verdict.map_bootstrap`)."""
    p = ev.params
    a0 = AREA_NAMES.index(area)
    img_ids = list(p.imgIds)
    n_img, n_area = len(img_ids), len(p.areaRng)
    row_of = {iid: i for i, iid in enumerate(img_ids)}
    t_count = len(p.iouThrs)
    gt = np.zeros((n_img, n_classes))
    img_parts, cls_parts, score_parts, tp_parts, fp_parts = [], [], [], [], []
    for k0, cat in enumerate(p.catIds):
        k = int(cat) - 1
        base = k0 * n_area * n_img + a0 * n_img
        imgs, scores, tps, fps = [], [], [], []
        for i in range(n_img):
            e = ev.evalImgs[base + i]
            if e is None:
                continue
            r = row_of[e["image_id"]]
            gt[r, k] = np.count_nonzero(np.asarray(e["gtIgnore"]) == 0)
            s = np.asarray(e["dtScores"][:max_det], np.float64)
            if s.size == 0:
                continue
            dtm = np.asarray(e["dtMatches"])[:, :max_det]
            dtig = np.asarray(e["dtIgnore"])[:, :max_det].astype(bool)
            imgs.append(np.full(s.size, r))
            scores.append(s)
            tps.append(np.logical_and(dtm, ~dtig))
            fps.append(np.logical_and(np.logical_not(dtm), ~dtig))
        if not scores:
            continue
        s = np.concatenate(scores)
        order = np.argsort(-s, kind="mergesort")
        img_parts.append(np.concatenate(imgs)[order])
        cls_parts.append(np.full(s.size, k))
        score_parts.append(s[order])
        tp_parts.append(np.concatenate(tps, axis=1)[:, order])
        fp_parts.append(np.concatenate(fps, axis=1)[:, order])
    if img_parts:
        det_image, det_class = np.concatenate(img_parts), np.concatenate(cls_parts)
        det_score = np.concatenate(score_parts)
        det_tp, det_fp = np.concatenate(tp_parts, axis=1), np.concatenate(fp_parts, axis=1)
    else:
        det_image = det_class = np.zeros(0, np.int64)
        det_score = np.zeros(0)
        det_tp = det_fp = np.zeros((t_count, 0), bool)
    return MatchTable(n_img, n_classes, np.asarray(p.iouThrs, np.float64),
                      det_image.astype(np.int64), det_class.astype(np.int64), det_score,
                      det_tp, det_fp, gt)


def _check_pairing(labels: BoxLabels, detections: Sequence[Detections]) -> None:
    if len(detections) != len(labels):
        raise DataError("one detection list per labelled image is needed", where="evaluate",
                        value=(len(detections), len(labels)),
                        fix="decode every image of the labels, in their order")
    k = len(labels.class_names)
    for i, d in enumerate(detections):
        if len(d) and (d.classes.min() < 0 or d.classes.max() >= k):
            raise DataError("a detection's class is beyond the labels' classes",
                            where=f"image {labels.file_names[i]}", value=int(d.classes.max()),
                            fix=f"the model and the labels must share the {k} classes")


def evaluate(labels: BoxLabels, detections: Sequence[Detections]) -> DetectionMetrics:
    """COCO bbox metrics of ``detections`` (one per image of ``labels``, in order)."""
    _check_pairing(labels, detections)
    ev = cocoeval(coco_ground_truth(labels), coco_results(detections))
    return _metrics_from(ev, labels, detections)


def pseudo_labels(reference: Sequence[Detections], heights: Sequence[int],
                  widths: Sequence[int], class_names: Sequence[str], *,
                  gt_score_min: float) -> BoxLabels:
    """FP32's detections at or above ``gt_score_min`` as ground truth (label-free)."""
    kept = [d.above(gt_score_min) for d in reference]
    return BoxLabels([f"image_{i}" for i in range(len(kept))],
                     np.asarray(heights, np.int64), np.asarray(widths, np.int64),
                     [d.boxes for d in kept], [d.classes for d in kept], list(class_names))


@dataclass(frozen=True)
class LabelFreeMetrics:
    """The candidate against FP32's detections: COCO metrics with FP32's boxes as ground
    truth, FP32's boxes found at IoU 0.5 (same class), and the mean IoU of those matches."""

    vs_fp32: DetectionMetrics
    recall50: float
    mean_iou: float
    n_reference_boxes: int
    gt_score_min: float

    def to_dict(self) -> dict[str, Any]:
        return {"vs_fp32": self.vs_fp32.to_dict(), "recall50": self.recall50,
                "mean_iou": self.mean_iou, "n_reference_boxes": self.n_reference_boxes,
                "gt_score_min": self.gt_score_min}


def evaluate_label_free(reference: Sequence[Detections], candidate: Sequence[Detections],
                        heights: Sequence[int], widths: Sequence[int],
                        class_names: Sequence[str], *, gt_score_min: float = 0.25
                        ) -> LabelFreeMetrics:
    """The candidate's detections scored against FP32's (module docstring)."""
    gt = pseudo_labels(reference, heights, widths, class_names, gt_score_min=gt_score_min)
    _check_pairing(gt, candidate)
    ev = cocoeval(coco_ground_truth(gt), coco_results(candidate))
    metrics = _metrics_from(ev, gt, candidate)
    found, ious = 0, []
    for e in ev.evalImgs:
        if e is None or e["aRng"] != ev.params.areaRng[0] or not len(e["gtIds"]):
            continue
        gtm = np.asarray(e["gtMatches"])[0]  # IoU 0.5: the matched detection's id, or 0
        hit = np.flatnonzero(gtm > 0)
        found += hit.size
        if hit.size:
            iou = ev.ious[e["image_id"], e["category_id"]]  # [dets sorted by score, gts]
            dt_pos = {d: j for j, d in enumerate(e["dtIds"])}
            gt_pos = {g: j for j, g in enumerate(
                [a["id"] for a in ev._gts[e["image_id"], e["category_id"]]])}
            for h in hit:
                ious.append(float(iou[dt_pos[int(gtm[h])], gt_pos[e["gtIds"][h]]]))
    n_ref = gt.n_boxes
    return LabelFreeMetrics(metrics, found / n_ref if n_ref else float("nan"),
                            float(np.mean(ious)) if ious else float("nan"), n_ref,
                            float(gt_score_min))


def _metrics_from(ev: Any, labels: BoxLabels, detections: Sequence[Detections]
                  ) -> DetectionMetrics:
    prec = ev.eval["precision"]  # [T, R, K, A, M]
    m = len(ev.params.maxDets) - 1
    per_class = {}
    for k, name in enumerate(labels.class_names):
        n_gt = int(sum(int(np.count_nonzero(c == k)) for c in labels.classes))
        per_class[name] = {"ap": _mean_valid(prec[:, :, k, 0, m]),
                           "ap50": _mean_valid(prec[0, :, k, 0, m]), "n_gt": n_gt}
    per_size = {a: _mean_valid(prec[:, :, :, j, m]) for j, a in enumerate(AREA_NAMES) if j}
    p_all = prec[:, :, :, 0, m]  # [T, R, K]
    pr50 = _mean_over(p_all[0], axis=1)
    pr = _mean_over(p_all.transpose(1, 0, 2).reshape(p_all.shape[1], -1), axis=1)
    return DetectionMetrics(
        map=_mean_valid(prec[:, :, :, 0, m]), map50=_mean_valid(prec[0, :, :, 0, m]),
        map75=_mean_valid(prec[5, :, :, 0, m]), per_class=per_class, per_size=per_size,
        n_images=len(labels), n_gt=labels.n_boxes,
        n_detections=int(sum(len(d) for d in detections)),
        table=match_table(ev, len(labels.class_names)),
        pr50=tuple(float(v) for v in pr50), pr=tuple(float(v) for v in pr))
