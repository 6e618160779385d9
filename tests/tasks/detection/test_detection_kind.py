"""The detection kind end to end on the real PP-PicoDet: a fixed batch of 1 fed one page at a
time, COCO mAP against the rendered pages' labels, the paired mAP test of FP32 against
itself, and the label-free metrics; on nudenet's dynamic-batch YOLOv8n the class names come
from its metadata and a decoder that does not fit is refused before anything runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from quantkit.assets import cache_root
from quantkit.backends.runners import ort_runner
from quantkit.data.layout_pages import LAYOUT_CLASSES, render_pages
from quantkit.errors import ModelError
from quantkit.tasks.detection.kind import DetectionKind
from quantkit.tasks.detection.labels import labels_from_arrays


def test_layout_detector_end_to_end(layout_model):
    kind = DetectionKind.for_model(onnx.load(str(layout_model)), "gfl")
    assert kind.fixed_batch == 1 and kind.class_names == LAYOUT_CLASSES
    assert (kind.preprocess.height, kind.preprocess.width) == (800, 608)
    pages = list(render_pages(4, seed=0, n_templates=400, cache_dir=str(cache_root()), start=10))
    with ort_runner(None, layout_model, name="layout") as r:
        dets = kind.detect(r.infer, [p.image for p in pages], batch_size=8)
    assert len(dets) == 4 and all(len(d) > 0 for d in dets)
    labels = labels_from_arrays([f"p{i}" for i in range(4)], [p.image.shape[0] for p in pages],
                                [p.image.shape[1] for p in pages], [p.boxes for p in pages],
                                [p.classes for p in pages], LAYOUT_CLASSES)
    m = kind.metrics(labels, dets)
    assert 0.3 < m.map <= 1.0 and m.map50 >= m.map  # the real detector reads these pages
    lf = kind.label_free(dets, dets, labels.heights, labels.widths, gt_score_min=0.5)
    assert lf.recall50 == 1.0 and lf.mean_iou == pytest.approx(1.0)


def test_nudenet_kind_and_a_decoder_that_does_not_fit(nudenet_model):
    proto = onnx.load(str(nudenet_model))
    kind = DetectionKind.for_model(proto, "yolov8", family="nudenet",
                                   preprocess={"height": 320, "width": 320})
    assert len(kind.class_names) == 18 and kind.fixed_batch is None
    with ort_runner(None, nudenet_model, name="nudenet") as r:
        dets = kind.detect(r.infer, [np.full((240, 320, 3), 128, np.uint8)] * 3, batch_size=2)
    assert len(dets) == 3
    with pytest.raises(ModelError, match=r"output0 float32\[batch, 22, .*yolov8"):
        DetectionKind.for_model(proto, "gfl")
