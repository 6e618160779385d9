"""Raw detector outputs -> per-image detections in original image pixels.

One registry, :data:`DECODERS`, of the export layouts users have:

``yolov8``  one output ``[B, 4 + C, N]``: cx, cy, w, h in input pixels, then C class scores
            (already sigmoid); YOLOv8 / 11 exports (ultralytics ``non_max_suppression``).
``yolov5``  one output ``[B, N, 5 + C]``: cx, cy, w, h, objectness, C class scores; a box's
            class score is ``objectness * class score`` (YOLOv5 / v7-style exports).
``gfl``     per-stride pairs ``scores [B, HW_s, C]`` and ``box distributions
            [B, HW_s, 4 (reg_max + 1)]`` (PP-PicoDet, GFL, NanoDet): the box is the anchor
            point ``((col + offset) s, (row + offset) s)`` minus / plus the expected distance
            ``s * sum_k k softmax(d)_k`` to the left, top, right and bottom edges
            (rapid-layout's ``PPPostProcess``: offset 0.5, strides 8, 16, 32, 64, top 1000 per
            stride by best class score).
``nms``     the model already ends in NMS: EfficientNMS-style ``num_dets [B, 1], boxes
            [B, K, 4], scores [B, K], classes [B, K]``, or ONNX ``NonMaxSuppression``'s
            ``selected_indices [K, 3]`` (batch, class, box) beside ``boxes [B, N, 4]`` and
            ``scores [B, C, N]``.

Every decoder but ``nms`` ends in class-wise NMS (:mod:`quantkit.tasks.detection.nms`) with
the family's thresholds (:data:`FAMILY_DEFAULTS`, each overridable), then boxes go back to
original pixels (:class:`~quantkit.tasks.detection.preprocess.BoxTransform`). Vectorized over
boxes; the loops are over images, strides and classes.

A decoder checks the output shapes before anything runs (:func:`check_decoder`): a layout
that does not fit is one :class:`~quantkit.errors.ModelError` naming the shapes and the
decoders that do fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from quantkit.errors import ConfigError, ModelError
from quantkit.tasks.detection.boxes import Detections, cxcywh_to_xyxy, empty_detections
from quantkit.tasks.detection.nms import nms
from quantkit.tasks.detection.preprocess import BoxTransform

__all__ = ["DECODERS", "FAMILY_DEFAULTS", "DecodeParams", "Decoder", "OutputSpec",
           "Part", "check_decoder", "decode", "fitting_decoders", "describe_shapes", "n_classes_of",
           "output_parts"]

Dim = int | str | None  # a symbolic or unknown dimension is a str or None


@dataclass(frozen=True)
class OutputSpec:
    """One model output as declared (name, shape with symbolic dims, dtype)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class DecodeParams:
    """Thresholds and limits of one decoder (defaults per family: :data:`FAMILY_DEFAULTS`).

    ``score_threshold``: candidates scoring at most this are dropped (strictly above, as
    rapid-layout; ultralytics keeps ``>``, too). ``iou_threshold``: NMS suppresses overlaps
    above it. ``max_det``: detections kept per image. ``agnostic``: NMS across classes.
    ``multi_label``: every class above the threshold is a candidate of its own (ultralytics
    validation), else only each box's best class. ``pre_nms_top_k``: candidates kept per
    stride (gfl) or per image (the others) by best score before NMS.
    ``per_class_candidates`` / ``per_class_max``: rapid-layout's ``candidate_size`` /
    ``keep_top_k`` per class. gfl: ``strides`` (None: inferred from the shapes),
    ``cell_offset`` (0.5 PicoDet, 0 NanoDet / GFL). nms: ``box_format`` of its boxes.
    ``max_candidates``: at most this many (box, class) candidates, the highest scores,
    enter NMS (bounds its memory: one IoU matrix per class).
    """

    score_threshold: float = 0.001
    iou_threshold: float = 0.7
    max_det: int = 300
    agnostic: bool = False
    multi_label: bool = True
    pre_nms_top_k: int | None = 30000
    per_class_candidates: int | None = None
    per_class_max: int | None = None
    strides: tuple[int, ...] | None = None
    cell_offset: float = 0.5
    box_format: str = "xyxy"  # xyxy | cxcywh
    max_candidates: int | None = 30000  # ultralytics' max_nms: the top-scoring into NMS

    def __post_init__(self) -> None:
        where = "model.output.decode"
        if not 0.0 <= self.score_threshold < 1.0:
            raise ConfigError("score threshold must be in [0, 1)",
                              where=f"{where}.score_threshold", value=self.score_threshold,
                              fix="use e.g. 0.001 for mAP, 0.25 to draw boxes")
        if not 0.0 < self.iou_threshold <= 1.0:
            raise ConfigError("IoU threshold must be in (0, 1]", where=f"{where}.iou_threshold",
                              value=self.iou_threshold, fix="use e.g. 0.7 (YOLO) or 0.6 (PicoDet)")
        if self.max_det < 1:
            raise ConfigError("max_det must be >= 1", where=f"{where}.max_det",
                              value=self.max_det, fix="use e.g. 100 (COCO's maxDets)")
        if self.box_format not in ("xyxy", "cxcywh"):
            raise ConfigError("unknown box format", where=f"{where}.box_format",
                              value=self.box_format, fix="use xyxy or cxcywh")
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))


#: Each family's defaults: ultralytics validation (conf 0.001, IoU 0.7, max_det 300,
#: multi-label), PaddleDetection's PicoDet eval (score 0.025, IoU 0.6, nms_top_k 1000, keep
#: 100), the nms family keeps what the model's own NMS kept. ``max_det`` is capped at COCO's
#: 100 by the evaluator anyway.
FAMILY_DEFAULTS: dict[str, DecodeParams] = {
    "yolov8": DecodeParams(score_threshold=0.001, iou_threshold=0.7, max_det=300,
                           multi_label=True, pre_nms_top_k=30000),
    "yolov5": DecodeParams(score_threshold=0.001, iou_threshold=0.6, max_det=300,
                           multi_label=True, pre_nms_top_k=30000),
    "gfl": DecodeParams(score_threshold=0.025, iou_threshold=0.6, max_det=100,
                        multi_label=True, pre_nms_top_k=1000, cell_offset=0.5),
    "nms": DecodeParams(score_threshold=0.0, iou_threshold=1.0, max_det=300,
                        multi_label=False, pre_nms_top_k=None),
}


def _known(d: Dim) -> int | None:
    return d if isinstance(d, int) and not isinstance(d, bool) and d > 0 else None


def describe_shapes(outputs: Sequence[OutputSpec]) -> str:
    def dim(d: Dim) -> str:
        return str(d) if d is not None else "?"
    return ", ".join(f"{o.name} {o.dtype}[{', '.join(dim(d) for d in o.shape)}]"
                     for o in outputs)


# --------------------------------------------------------------------------- shape checks


def _fit_packed(outs: Sequence[OutputSpec], n_classes: int | None, channel_axis: int,
                extra: int, layout: str) -> str | None:
    """Why one output packing ``extra`` + C channels at ``channel_axis`` and N candidates at
    the other axis (``layout``, e.g. ``[B, 4 + C, N]``) does not fit; None when it does."""
    if len(outs) != 1 or len(outs[0].shape) != 3:
        return f"needs one output of rank 3 {layout}"
    n_axis = 3 - channel_axis
    c, n = _known(outs[0].shape[channel_axis]), _known(outs[0].shape[n_axis])
    if c is None or c <= extra:
        return f"needs a known channel dim {extra} + C >= {extra + 1} at axis {channel_axis}"
    if n is not None and n <= c:
        return (f"axis {n_axis} ({n}) should hold the N candidates, more than the {c} "
                "channels")
    if n_classes is not None and c != extra + n_classes:
        return f"axis {channel_axis} is {c}, not {extra} + {n_classes} classes"
    return None


def _fit_yolov8(outs: Sequence[OutputSpec], n_classes: int | None) -> str | None:
    return _fit_packed(outs, n_classes, 1, 4, "[B, 4 + C, N]")


def _fit_yolov5(outs: Sequence[OutputSpec], n_classes: int | None) -> str | None:
    return _fit_packed(outs, n_classes, 2, 5, "[B, N, 5 + C]")


def _gfl_split(outs: Sequence[OutputSpec], n_classes: int | None
               ) -> tuple[list[int], list[int], int, int] | str:
    """(score output indices, box output indices, C, reg_max + 1) or why it does not fit."""
    if len(outs) < 2 or len(outs) % 2 or any(len(o.shape) != 3 for o in outs):
        return "needs an even number of rank-3 outputs: per stride [B, HW, C] and " \
               "[B, HW, 4 (reg_max + 1)]"
    last = [_known(o.shape[2]) for o in outs]
    if any(v is None for v in last):
        return "needs known last dims (C and 4 (reg_max + 1))"
    kinds = sorted(set(last))
    if len(kinds) != 2:
        return (f"needs exactly two last dims (C and 4 (reg_max + 1)), got {sorted(set(last))}"
                if len(kinds) > 2 else "cannot tell class scores from box distributions: "
                "both have the same last dim")
    if n_classes is not None and n_classes in kinds:
        c = n_classes
    else:
        fours = [k for k in kinds if k % 4 == 0]
        if len(fours) != 1:
            return (f"cannot tell which of {kinds} is 4 (reg_max + 1); give model.output."
                    "n_classes")
        c = [k for k in kinds if k != fours[0]][0]
    bins4 = [k for k in kinds if k != c][0]
    if bins4 % 4 or bins4 < 8:
        return f"box distributions need 4 (reg_max + 1) bins, reg_max >= 1; got {bins4}"
    if n_classes is not None and c != n_classes:
        return f"class scores have {c} channels, not {n_classes}"
    score_idx = [i for i, v in enumerate(last) if v == c]
    box_idx = [i for i, v in enumerate(last) if v == bins4]
    if len(score_idx) != len(box_idx):
        return f"{len(score_idx)} score outputs but {len(box_idx)} box outputs"
    for s, b in zip(score_idx, box_idx):
        hs, hb = _known(outs[s].shape[1]), _known(outs[b].shape[1])
        if hs is not None and hb is not None and hs != hb:
            return f"{outs[s].name} has {hs} points but its box output {outs[b].name} {hb}"
    return score_idx, box_idx, c, bins4 // 4


def _fit_gfl(outs: Sequence[OutputSpec], n_classes: int | None) -> str | None:
    r = _gfl_split(outs, n_classes)
    return r if isinstance(r, str) else None


def _nms_kind(outs: Sequence[OutputSpec]) -> str | None:
    ranks = sorted(len(o.shape) for o in outs)
    if len(outs) == 4 and ranks == [2, 2, 2, 3]:
        return "efficient"
    if len(outs) == 3 and any(len(o.shape) == 2 and _known(o.shape[1]) == 3 and
                              o.dtype.startswith("int") for o in outs):
        return "onnx"
    return None


def _fit_nms(outs: Sequence[OutputSpec], n_classes: int | None) -> str | None:
    if _nms_kind(outs) is None:
        return ("needs EfficientNMS-style num_dets [B, 1], boxes [B, K, 4], scores [B, K], "
                "classes [B, K], or NonMaxSuppression's selected_indices int64 [K, 3] with "
                "boxes [B, N, 4] and scores [B, C, N]")
    return None


# --------------------------------------------------------------------------- decoding


def _candidates_top(scores: np.ndarray, params: DecodeParams
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor index, class, score) of the candidates of one image's ``scores`` [N, C]."""
    if params.pre_nms_top_k is not None and scores.shape[0] > params.pre_nms_top_k:
        best = scores.max(axis=1)
        top = np.argsort(-best, kind="stable")[:params.pre_nms_top_k]
        top.sort()
    else:
        top = np.arange(scores.shape[0])
    s = scores[top]
    if params.multi_label:
        a, c = np.nonzero(s > params.score_threshold)
        return top[a], c, s[a, c]
    c = s.argmax(axis=1)
    v = s[np.arange(s.shape[0]), c]
    keep = v > params.score_threshold
    return top[keep], c[keep], v[keep]


def _finish(boxes_in: np.ndarray, scores: np.ndarray, classes: np.ndarray,
            params: DecodeParams, transform: BoxTransform, *, run_nms: bool = True
            ) -> Detections:
    if scores.size == 0:
        return empty_detections()
    if params.max_candidates is not None and scores.size > params.max_candidates:
        top = np.argsort(-scores, kind="stable")[:params.max_candidates]
        boxes_in, scores, classes = boxes_in[top], scores[top], classes[top]
    if run_nms:
        keep = nms(boxes_in, scores, classes, iou_threshold=params.iou_threshold,
                   max_det=params.max_det, agnostic=params.agnostic,
                   per_class_candidates=params.per_class_candidates,
                   per_class_max=params.per_class_max)
    else:
        keep = np.lexsort((np.arange(scores.size), -scores.astype(np.float64)))[:params.max_det]
    return Detections(transform.to_original(boxes_in[keep]), scores[keep], classes[keep])


def _decode_yolov8(arrays: list[np.ndarray], outs, params, transforms, n_classes, input_hw):
    y = arrays[0]
    dets = []
    for i, t in enumerate(transforms):
        p = y[i].T  # [N, 4 + C]
        a, c, s = _candidates_top(p[:, 4:], params)
        dets.append(_finish(cxcywh_to_xyxy(p[a, :4]), s, c, params, t))
    return dets


def _decode_yolov5(arrays, outs, params, transforms, n_classes, input_hw):
    y = arrays[0]
    dets = []
    for i, t in enumerate(transforms):
        p = y[i]  # [N, 5 + C]
        obj = p[:, 4]
        live = np.flatnonzero(obj > params.score_threshold)
        a, c, s = _candidates_top(p[live, 5:] * obj[live, None], params)
        dets.append(_finish(cxcywh_to_xyxy(p[live[a], :4]), s, c, params, t))
    return dets


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _gfl_strides(points: list[int], height: int, width: int, given) -> list[int]:
    if given is not None:
        if len(given) != len(points):
            raise ConfigError("one stride per score / box output pair", where=
                              "model.output.decode.strides", value=list(given),
                              fix=f"give {len(points)} strides, or leave it null")
        return list(given)
    out = []
    for hw in points:
        found = [s for s in (4, 8, 16, 32, 64, 128)
                 if -(-height // s) * -(-width // s) == hw]
        if not found:
            raise ModelError("cannot infer a stride from the number of points", where=
                             f"gfl output with {hw} points at input {height}x{width}",
                             value=hw, fix="set model.output.decode.strides")
        out.append(found[0])
    return out


def _decode_gfl(arrays, outs, params, transforms, n_classes, input_hw):
    score_idx, box_idx, c, bins = _gfl_split(outs, n_classes)
    height, width = input_hw
    points = [arrays[i].shape[1] for i in score_idx]
    strides = _gfl_strides(points, height, width, params.strides)
    grid = []
    for s in strides:
        rows, cols = -(-height // s), -(-width // s)
        yy, xx = np.meshgrid(np.arange(rows, dtype=np.float32),
                             np.arange(cols, dtype=np.float32), indexing="ij")
        ctr = np.stack([(xx.ravel() + params.cell_offset) * s,
                        (yy.ravel() + params.cell_offset) * s], axis=1)
        grid.append(ctr)
    bins_range = np.arange(bins, dtype=np.float32)
    dets = []
    for i, t in enumerate(transforms):
        all_boxes, all_scores = [], []
        for k, (si, bi, s) in enumerate(zip(score_idx, box_idx, strides)):
            sc = arrays[si][i]  # [HW, C]
            if params.pre_nms_top_k is not None and sc.shape[0] > params.pre_nms_top_k:
                top = np.argsort(-sc.max(axis=1), kind="stable")[:params.pre_nms_top_k]
            else:
                top = np.arange(sc.shape[0])
            dist = _softmax(arrays[bi][i][top].reshape(-1, 4, bins), axis=2) @ bins_range
            dist = dist * np.float32(s)  # [K, 4]: left, top, right, bottom
            ctr = grid[k][top]
            all_boxes.append(np.concatenate([ctr - dist[:, :2], ctr + dist[:, 2:]], axis=1))
            all_scores.append(sc[top])
        boxes = np.concatenate(all_boxes)
        scores = np.concatenate(all_scores)
        if params.multi_label:
            a, cls = np.nonzero(scores > params.score_threshold)
            v = scores[a, cls]
        else:
            cls = scores.argmax(axis=1)
            v = scores[np.arange(scores.shape[0]), cls]
            a = np.flatnonzero(v > params.score_threshold)
            cls, v = cls[a], v[a]
        dets.append(_finish(boxes[a], v, cls, params, t))
    return dets


def _decode_nms(arrays, outs, params, transforms, n_classes, input_hw):
    kind = _nms_kind(outs)
    dets = []
    if kind == "efficient":
        by_rank = {}
        for o, a in zip(outs, arrays):
            by_rank.setdefault(len(o.shape), []).append((o, a))
        boxes = by_rank[3][0][1]
        two = by_rank[2]
        num = [a for o, a in two if a.shape[-1] == 1 and a.shape[1:] == (1,)]
        rest = [(o, a) for o, a in two if not (a.shape[-1] == 1 and a.shape[1:] == (1,))]
        if len(num) != 1 or len(rest) != 2:
            raise ModelError("cannot tell num_dets from scores and classes", where=
                             describe_shapes(outs), value=[o.name for o, _ in two],
                             fix="export EfficientNMS's four outputs (num_dets [B, 1] first)")
        floats = [a for o, a in rest if not o.dtype.startswith("int")]
        ints = [a for o, a in rest if o.dtype.startswith("int")]
        if len(floats) == 1 and len(ints) == 1:
            scores, classes = floats[0], ints[0]
        else:  # both float: scores in [0, 1]; classes are whole numbers (take names' order)
            names = [o.name.lower() for o, _ in rest]
            sc = [j for j, nm in enumerate(names) if "score" in nm]
            if len(sc) != 1:
                raise ModelError("cannot tell scores from classes", where=describe_shapes(outs),
                                 value=names, fix="name the outputs *scores* and *classes*")
            scores, classes = rest[sc[0]][1], rest[1 - sc[0]][1]
        for i, t in enumerate(transforms):
            n = int(np.asarray(num[0][i]).reshape(-1)[0])
            b = boxes[i, :n].astype(np.float32)
            if params.box_format == "cxcywh":
                b = cxcywh_to_xyxy(b)
            s = scores[i, :n].astype(np.float32)
            c = classes[i, :n].astype(np.int64)
            keep = s > params.score_threshold
            dets.append(_finish(b[keep], s[keep], c[keep], params, t, run_nms=False))
        return dets
    sel = next(a for o, a in zip(outs, arrays) if len(o.shape) == 2)
    boxes = next(a for o, a in zip(outs, arrays) if len(o.shape) == 3 and a.shape[-1] == 4)
    scores = next(a for o, a in zip(outs, arrays) if len(o.shape) == 3 and a is not boxes)
    sel = np.asarray(sel, dtype=np.int64).reshape(-1, 3)
    for i, t in enumerate(transforms):
        mine = sel[sel[:, 0] == i]
        c, j = mine[:, 1], mine[:, 2]
        b = boxes[i, j].astype(np.float32)
        if params.box_format == "cxcywh":
            b = cxcywh_to_xyxy(b)
        s = scores[i, c, j].astype(np.float32)
        keep = s > params.score_threshold
        dets.append(_finish(b[keep], s[keep], c[keep], params, t, run_nms=False))
    return dets


@dataclass(frozen=True)
class Decoder:
    """A registered decoder: its name, what it reads, the shape check and the decode."""

    name: str
    layout: str
    fit: Callable[[Sequence[OutputSpec], int | None], str | None]
    run: Callable[..., list[Detections]]
    extra: dict[str, Any] = field(default_factory=dict)


DECODERS: dict[str, Decoder] = {
    "yolov8": Decoder("yolov8", "one output [B, 4 + C, N]", _fit_yolov8, _decode_yolov8),
    "yolov5": Decoder("yolov5", "one output [B, N, 5 + C]", _fit_yolov5, _decode_yolov5),
    "gfl": Decoder("gfl", "per stride [B, HW, C] scores and [B, HW, 4 (reg_max + 1)] boxes",
                   _fit_gfl, _decode_gfl),
    "nms": Decoder("nms", "EfficientNMS (num_dets, boxes, scores, classes) or "
                   "NonMaxSuppression's selected_indices", _fit_nms, _decode_nms),
}


def fitting_decoders(outputs: Sequence[OutputSpec], n_classes: int | None = None) -> list[str]:
    """The registered decoders whose layout fits ``outputs``."""
    return [n for n, d in DECODERS.items() if d.fit(outputs, n_classes) is None]


def n_classes_of(name: str, outputs: Sequence[OutputSpec]) -> int | None:
    """The class count the layout ``name`` reads off ``outputs`` (None: not in the shapes,
    e.g. ``nms``)."""
    if name == "yolov8":
        return _known(outputs[0].shape[1]) - 4 if _known(outputs[0].shape[1]) else None
    if name == "yolov5":
        return _known(outputs[0].shape[2]) - 5 if _known(outputs[0].shape[2]) else None
    if name == "gfl":
        r = _gfl_split(outputs, None)
        return None if isinstance(r, str) else r[2]
    return None


#: a channel range of one output: (axis, start, stop); stop None: to the end
Part = tuple[int, int, int | None]


def output_parts(name: str, outputs: Sequence[OutputSpec]) -> dict[str, dict[str, Part]]:
    """Output name -> the channel ranges of different meaning that layout ``name`` packs
    into one tensor: ``yolov8`` boxes (4) and class scores, ``yolov5`` boxes, objectness and
    class scores. Box coordinates (input pixels, up to hundreds) and scores (0..1) compared
    as one tensor hide the scores (issue 46: YOLOv8n INT8 at cosine 0.9998 on the raw head,
    0.57 on its score channels), so the per-layer comparison reports each range. ``gfl`` and
    ``nms`` keep scores and boxes in outputs of their own: nothing to split."""
    if name == "yolov8":
        return {outputs[0].name: {"boxes": (1, 0, 4), "scores": (1, 4, None)}}
    if name == "yolov5":
        return {outputs[0].name: {"boxes": (2, 0, 4), "objectness": (2, 4, 5),
                                  "scores": (2, 5, None)}}
    return {}


def check_decoder(name: str, outputs: Sequence[OutputSpec], n_classes: int | None = None
                  ) -> Decoder:
    """The decoder ``name`` if it fits ``outputs``; one clear error otherwise (unknown
    decoder: ConfigError; a layout that does not fit, a classifier's logits: ModelError)."""
    if name not in DECODERS:
        raise ConfigError("unknown detection decoder", where="model.output.decoder",
                          value=name, fix=f"use one of {sorted(DECODERS)}")
    why = DECODERS[name].fit(outputs, n_classes)
    if why is None:
        return DECODERS[name]
    fits = fitting_decoders(outputs, n_classes)
    shapes = describe_shapes(outputs)
    if fits:
        fix = f"use model.output.decoder={fits[0]}" + (
            f" (decoders that fit: {', '.join(fits)})" if len(fits) > 1 else
            " (the one decoder that fits)")
    elif len(outputs) == 1 and len(outputs[0].shape) == 2:
        fix = ("no detection decoder fits: a [B, C] output is a classifier's logits; use "
               "model.output.kind=logits")
    else:
        fix = ("no detection decoder fits these outputs; the layouts: " +
               "; ".join(f"{n}: {d.layout}" for n, d in DECODERS.items()))
    raise ModelError(f"decoder {name} ({DECODERS[name].layout}) does not fit the model's "
                     f"outputs: {why}", where="model.output.decoder", value=shapes, fix=fix)


def decode(name: str, arrays: Sequence[np.ndarray], outputs: Sequence[OutputSpec],
           transforms: Sequence[BoxTransform], *, input_hw: tuple[int, int],
           params: DecodeParams | None = None, n_classes: int | None = None
           ) -> list[Detections]:
    """Decode one batch: ``arrays`` in the order of ``outputs`` (the model's outputs),
    ``transforms`` one per image (how it was placed in the ``input_hw`` model input).
    ``params`` None: the family's defaults (:data:`FAMILY_DEFAULTS`)."""
    dec = check_decoder(name, outputs, n_classes)
    params = FAMILY_DEFAULTS[name] if params is None else params
    actual = [OutputSpec(o.name, tuple(a.shape), o.dtype) for o, a in zip(outputs, arrays)]
    if len(arrays) != len(outputs) or dec.fit(actual, n_classes) is not None:
        raise ModelError("the outputs the model returned do not fit the decoder", where=
                         f"decoder {name}", value=describe_shapes(actual),
                         fix="check model.output.names: one array per declared output")
    batch = {a.shape[0] for o, a in zip(outputs, arrays) if not (name == "nms" and
                                                                 len(o.shape) == 2 and
                                                                 a.shape[-1] == 3)}
    if len(batch) != 1 or batch.pop() != len(transforms):
        raise ModelError("one image transform per batch row is needed", where=f"decoder {name}",
                         value=(describe_shapes(actual), len(transforms)),
                         fix="pass the transforms of the batch's images")
    return dec.run(list(arrays), list(outputs), params, list(transforms), n_classes,
                   (int(input_hw[0]), int(input_hw[1])))
