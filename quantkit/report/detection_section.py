"""The report's detection section (a detector's run): per candidate mAP@[.5:.95], mAP@.5 and
mAP@.75 against the labels and against FP32's detections (recall of FP32's boxes at IoU 0.5,
mean IoU); AP per class and per object size, FP32 beside each candidate; the grids of sample
images where each candidate disagrees most with FP32 (files in the run dir, drawn by the run:
quantkit/run/detection_samples.py); the raw outputs the decoder reads against FP32's, each
channel range of its own meaning (boxes, scores) beside the whole tensor. The PR curves are a
plot (quantkit/report/plots.py)."""

from __future__ import annotations

from quantkit.compare.layer_diff import split_part_key
from quantkit.record.detection import DetectionRecord
from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, num, text

__all__ = ["detection"]

SIZES = ("small", "medium", "large")


def _ap(d: DetectionRecord | None, cls: str, vs_fp32: bool = False) -> str:
    if d is None:
        return DASH
    table = (d.vs_fp32.per_class if vs_fp32 and d.vs_fp32 is not None else
             None if vs_fp32 else d.per_class) or {}
    st = table.get(cls)
    return DASH if st is None else f"{num(st.ap)} / {num(st.ap50)}"


def detection(record: RunRecord) -> dict[str, object] | None:
    """The section's rows (None: not a detector's run)."""
    cands = {n: c.detection for n, c in record.candidates.items() if c.detection is not None}
    if not cands:
        return None
    labelled = any(d.labelled for d in cands.values())
    rows = []
    for name, d in cands.items():
        v, c = d.vs_fp32, record.candidates[name]
        m = c.metrics  # the scalars; vs FP32 only for a candidate (DASH for FP32 itself)
        rows.append({"name": name, "split": text(c.split or (c.verdict.split if c.verdict
                                                                  else None)),
                     "n": num(d.n_images), "boxes": num(d.n_detections),
                     "map": num(m.map), "map50": num(m.map50), "map75": num(m.map75),
                     "map_vs_fp32": num(m.map_vs_fp32) if v else DASH,
                     "map50_vs_fp32": num(m.map50_vs_fp32) if v else DASH,
                     "recall50": num(m.recall50_fp32) if v else DASH,
                     "mean_iou": num(m.mean_iou_fp32) if v else DASH,
                     "ref_boxes": num(v.n_reference_boxes) if v else DASH})
    base = (next(iter(cands.values())).per_class if labelled else
            next((d.vs_fp32.per_class for d in cands.values() if d.vs_fp32), None)) or {}
    per_class = [{"cls": k, "n_gt": num(st.n_gt),
                  "cells": [_ap(d, k, vs_fp32=not labelled) for d in cands.values()]}
                 for k, st in base.items()]
    per_size = [{"size": s, "cells": [num((d.per_size or {}).get(s)) for d in cands.values()]}
                for s in SIZES] if labelled else []
    samples = [{"name": n, "grid": d.samples.grid, "score_min": num(d.samples.score_min),
                "mean": num(d.samples.mean_disagreement),
                "images": [{"file": text(i.file), "disagreement": num(i.disagreement),
                            "fp32": i.fp32_boxes, "candidate": i.candidate_boxes}
                           for i in d.samples.images]}
               for n, d in cands.items() if d.samples is not None]
    outputs = _raw_outputs(record)
    gt_min = next((d.vs_fp32.gt_score_min for d in cands.values() if d.vs_fp32), None)
    names = [f"{r['name']} ({r['split']})" for r in rows]  # each entry's own split
    return {"labelled": labelled, "rows": rows, "names": names, "per_class": per_class,
            "per_size": per_size, "samples": samples, "gt_score_min": num(gt_min),
            "outputs": outputs,
            "against": "the labels" if labelled else "FP32's detections (label-free)"}


def _raw_outputs(record: RunRecord) -> dict[str, object] | None:
    """Rows of the per-layer statistics of the outputs packing boxes and scores: the whole
    tensor, then each channel range, cosine / SQNR dB per candidate with per-layer numbers."""
    with_layers = {n: c.layers for n, c in record.candidates.items() if c.layers}
    parts: dict[str, list[tuple[str, str]]] = {}  # tensor -> its (part, key), in record order
    for key in dict.fromkeys(k for layers in with_layers.values() for k in layers):
        found = split_part_key(key)
        if found:
            parts.setdefault(found[0], []).append((found[1], key))
    rows = []
    for tensor, ranges in parts.items():
        for part, key in [("all channels", tensor), *ranges]:
            cells = [DASH if (st := layers.get(key)) is None else
                     f"{num(st.cosine)} / {num(st.sqnr_db, 1)} dB"
                     for layers in with_layers.values()]
            rows.append({"tensor": tensor, "part": part, "cells": cells})
    return {"names": list(with_layers), "rows": rows} if rows else None
