"""The detection output kind in the run (DESIGN.md, "Tasks"): the one place the stages ask
what a detector's outputs mean.

* :func:`detector_of`: the model's :class:`~quantkit.tasks.detection.kind.DetectionKind`
  (``model.output.decoder`` checked against the declared outputs, the family's thresholds and
  preprocessing, the class names), read from the ONNX file before any data is read;
* :func:`detect_split`: a runner over a split -> :class:`PackedDetections` (decoded batch by
  batch: memory O(batch));
* :func:`detection_evidence`: the task metrics of a split's detections, COCO's own
  (pycocotools): mAP@[.5:.95], mAP@.5, mAP@.75, per class, per object size, the PR curves
  against the labels; and for a candidate, against FP32's detections (those scoring at least
  ``model.output.gt_score_min``) as ground truth: mAP vs FP32, FP32's boxes found at IoU 0.5
  (recall), the mean IoU of those matches;
* :func:`detection_test`: the paired test the verdict resamples
  (:func:`quantkit.verdict.map_bootstrap.map_signoff`: both models' mAP recomputed on every
  image bootstrap resample, groups resampled whole) against the labels, or label-free
  against FP32's detections;
* :func:`detection_score`: the low-noise score every choice on dev ranks by (recipe trials,
  the FP8 weight rounding, the search's measured damage): ``1 - mAP vs FP32``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from quantkit.errors import DataError
from quantkit.models import model_file
from quantkit.progress import track
from quantkit.run.context import RunContext
from quantkit.tasks.detection.coco import evaluate, evaluate_label_free, pseudo_labels
from quantkit.tasks.detection.kind import DetectionKind
from quantkit.tasks.detection.packed import PackedDetections
from quantkit.verdict.map_bootstrap import map_signoff
from quantkit.verdict.margin import MAP_METRIC_NAMES, Margin
from quantkit.verdict.outcome import SignoffTest

__all__ = ["check_reference", "detector_of", "detect_split", "detection_evidence", "detection_score",
           "detection_test", "is_detection", "metric_key"]

log = logging.getLogger(__name__)


def detector_of(settings, cache_dir: Path) -> DetectionKind:
    """The detection kind ``model.output`` declares for the model's ONNX file: one clear
    error when the decoder does not fit the declared outputs (a classifier's logits, another
    layout), naming the shapes and the decoders that fit."""
    path = model_file(settings, cache_dir)
    proto = onnx.load(str(path), load_external_data=False)
    return DetectionKind.from_config(proto, settings.model.output)


def is_detection(ctx: RunContext) -> bool:
    return ctx.model is not None and ctx.model.output_kind == "detection"


def metric_key(ctx: RunContext, metric: str) -> str:
    """Where an evaluation keeps ``metric`` (map, map50, map75): against the labels, or,
    label-free, against FP32's detections (``<metric>_vs_fp32``)."""
    return f"{metric}_vs_fp32" if ctx.splits.label_free else metric


def detect_split(ctx: RunContext, runner, data, *, desc: str = "", progress: bool = False
                 ) -> PackedDetections:
    """The detections of every image of ``data`` (a DetectionSplit) by ``runner``."""
    feeds = ctx.prepared_feeds()
    out: list = [None] * len(data)
    bs = ctx.settings.backend.batch_size
    for idx, feed in track(feeds.batches(data, bs), total=-(-len(data) // max(bs, 1)),
                           desc=desc, enabled=progress):
        raw = runner.infer(feed, feeds.output_names)
        for i, d in zip(idx, feeds.decode(data, idx, raw)):
            out[int(i)] = d
    return PackedDetections.of(out)


def _split(ctx: RunContext, split: str, rows=None):
    data = ctx.split(split)
    return data if rows is None else data.subset(rows)


def _vs_fp32(ctx: RunContext, data, reference: PackedDetections, dets: PackedDetections):
    return evaluate_label_free(reference.to_list(), dets.to_list(), data.heights, data.widths,
                               ctx.splits.label_names,
                               gt_score_min=ctx.settings.model.output.gt_score_min)


def detection_evidence(ctx: RunContext, split: str, dets: PackedDetections,
                       reference: PackedDetections | None) -> dict:
    """``{"metrics": {...}, "detection": {...}}`` of ``dets`` on ``split`` (module
    docstring); ``reference``: FP32's detections on the same split (None for FP32 itself)."""
    data = _split(ctx, split)
    metrics: dict[str, float] = {}
    det: dict = {"labelled": not data.label_free, "n_images": len(dets),
                 "n_detections": dets.n_detections}
    if not data.label_free:
        m = evaluate(data.boxes, dets.to_list())
        metrics.update({"map": m.map, "map50": m.map50, "map75": m.map75})
        det.update({k: v for k, v in m.to_dict().items()  # its scalars: metrics alone
                    if k not in ("n_images", *MAP_METRIC_NAMES)})
    if reference is not None:
        lf = _vs_fp32(ctx, data, reference, dets)
        v = lf.vs_fp32
        metrics.update({"map_vs_fp32": v.map, "map50_vs_fp32": v.map50,
                        "map75_vs_fp32": v.map75, "recall50_fp32": lf.recall50,
                        "mean_iou_fp32": lf.mean_iou})
        det["vs_fp32"] = {"n_reference_boxes": lf.n_reference_boxes,
                          "gt_score_min": lf.gt_score_min, "per_class": v.to_dict()["per_class"],
                          "pr50": list(v.to_dict()["pr50"]), "pr": list(v.to_dict()["pr"])}
    return {"metrics": {k: _num(x) for k, x in metrics.items()}, "detection": det}


def _num(x: float) -> float | None:
    """A finite float, or None (what the evaluator leaves undefined: no ground truth)."""
    return float(x) if x is not None and np.isfinite(x) else None


def _reference_truth(ctx: RunContext, data, ref: PackedDetections):
    """FP32's detections at or above ``model.output.gt_score_min`` as ground truth (label-free);
    one clear DataError when there is none to score a candidate against."""
    thr = ctx.settings.model.output.gt_score_min
    gt = pseudo_labels(ref.to_list(), data.heights, data.widths, ctx.splits.label_names,
                       gt_score_min=thr)
    if gt.n_boxes == 0:
        raise DataError("FP32 detects nothing at or above model.output.gt_score_min on these "
                        "images: no ground truth to score a candidate against",
                        where=f"the {data.name} split ({len(data)} images)", value=thr,
                        fix="lower model.output.gt_score_min (e.g. 0.05), give images with "
                            "objects this detector finds, or give labels (data.labels)")
    return gt


def check_reference(ctx: RunContext, split: str, ref: PackedDetections) -> None:
    """Before any candidate is built: a label-free split where FP32 finds no box at the
    ground-truth score is refused (nothing written yet)."""
    data = _split(ctx, split)
    if data.label_free:
        _reference_truth(ctx, data, ref)


def _tables(ctx: RunContext, data, ref: PackedDetections, cand: PackedDetections):
    """FP32's and the candidate's match tables against the same ground truth: the labels, or
    (label-free) FP32's own detections at or above ``model.output.gt_score_min``."""
    if data.label_free:
        gt = _reference_truth(ctx, data, ref)
    else:
        gt = data.boxes
    return evaluate(gt, ref.to_list()).table, evaluate(gt, cand.to_list()).table


def detection_test(ctx: RunContext, split: str, ref: PackedDetections, cand: PackedDetections,
                   *, name: str, metric: str, margin: Margin, policy, groups=None, rows=None
                   ) -> SignoffTest:
    """The candidate's paired mAP test on ``split`` (``rows``: on those images only;
    ``groups``: one code per image of the split, resampled whole)."""
    if rows is not None:
        ref, cand = ref[rows], cand[rows]
        groups = None if groups is None else np.asarray(groups)[rows]
    data = _split(ctx, split, rows)
    ref_table, cand_table = _tables(ctx, data, ref, cand)
    test = map_signoff(ref_table, cand_table, margin=margin, metric=metric, groups=groups,
                       policy=policy, candidate=name)
    if data.label_free:
        note = (f"label-free: both models scored against FP32's detections with score >= "
                f"{ctx.settings.model.output.gt_score_min:g} as ground truth (FP32 scores 1)")
        test = replace(test, reasons=[*test.reasons, note])
    return test


def detection_score(ctx: RunContext, data, ref: PackedDetections, out: PackedDetections
                    ) -> float:
    """``1 - mAP@[.5:.95]`` of ``out`` against FP32's detections ``ref`` on ``data`` (lower
    is better): the low-noise score a choice on dev ranks by."""
    v = _vs_fp32(ctx, data, ref, out).vs_fp32.map
    return float(1.0 - v) if np.isfinite(v) else 1.0
