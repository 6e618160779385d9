"""Labels as COCO JSON and YOLO txt folders, and every bad input as one clear DataError (what,
where, value, fix); COCO mAP and the label-free metrics from pycocotools."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from quantkit.errors import DataError
from quantkit.tasks.detection.boxes import Detections
from quantkit.tasks.detection.coco import evaluate, evaluate_label_free
from quantkit.tasks.detection.labels import load_coco_labels, load_yolo_labels

NAMES = ["text", "title", "figure"]


def coco(tmp_path, *, images=None, anns=None, cats=None, write_images=True):
    images = images if images is not None else [
        {"id": 1, "file_name": "a.png", "width": 100, "height": 80},
        {"id": 7, "file_name": "b.png", "width": 50, "height": 50}]
    anns = anns if anns is not None else [
        {"id": 1, "image_id": 1, "category_id": 3, "bbox": [10, 10, 30, 20]},
        {"id": 2, "image_id": 1, "category_id": 1, "bbox": [0, 40, 100, 40]}]
    cats = cats if cats is not None else [{"id": 1, "name": "text"}, {"id": 3, "name": "figure"}]
    if write_images:
        for im in images:
            Image.new("RGB", (im["width"], im["height"])).save(tmp_path / im["file_name"])
    p = tmp_path / "labels.json"
    p.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return p


def test_coco_labels_load_by_class_name_and_an_image_without_objects(tmp_path):
    lab = load_coco_labels(coco(tmp_path), class_names=NAMES, image_dir=tmp_path)
    assert lab.file_names == ["a.png", "b.png"] and lab.n_boxes == 2
    assert lab.classes[0].tolist() == [2, 0] and len(lab.classes[1]) == 0
    assert lab.boxes[0][0].tolist() == [10, 10, 40, 30]


@pytest.mark.parametrize("case, match", [
    ("empty", "the labels file is empty"),
    ("no_images", "the labels name no images"),
    ("missing_image", "image\\(s\\) that are not there"),
    ("orphan", "name images that are not in the labels"),
    ("outside", "outside their image"),
    ("no_area", "outside their image or of no area"),
    ("unknown_name", "not among the model's classes"),
    ("undeclared_cat", "class id beyond the model's classes"),
])
def test_bad_coco_labels_are_one_clear_error(tmp_path, case, match):
    kw = {}
    if case == "empty":
        p = tmp_path / "labels.json"
        p.write_text("")
    else:
        if case == "no_images":
            kw["images"] = []
        elif case == "orphan":
            kw["anns"] = [{"id": 5, "image_id": 99, "category_id": 1, "bbox": [0, 0, 5, 5]}]
        elif case == "outside":
            kw["anns"] = [{"id": 5, "image_id": 7, "category_id": 1, "bbox": [40, 40, 30, 5]}]
        elif case == "no_area":
            kw["anns"] = [{"id": 5, "image_id": 7, "category_id": 1, "bbox": [4, 4, 0, 5]}]
        elif case == "unknown_name":
            kw["cats"] = [{"id": 1, "name": "text"}, {"id": 3, "name": "photo"}]
        elif case == "undeclared_cat":
            kw["anns"] = [{"id": 5, "image_id": 7, "category_id": 12, "bbox": [1, 1, 5, 5]}]
        p = coco(tmp_path, write_images=case != "missing_image", **kw)
    with pytest.raises(DataError, match=match) as e:
        load_coco_labels(p, class_names=NAMES, image_dir=tmp_path)
    msg = str(e.value)
    assert "Fix:" in msg and " at " in msg


def test_coco_category_ids_beyond_the_model(tmp_path):
    p = coco(tmp_path, cats=[{"id": i, "name": f"c{i}"} for i in (1, 2, 3, 4)],
             anns=[])
    with pytest.raises(DataError, match="4 categories but the model has 3 classes"):
        load_coco_labels(p, n_classes=3)


def yolo(tmp_path, files: dict[str, str], images=("a.png", "b.png", "c.png")):
    idir, ldir = tmp_path / "images", tmp_path / "labels"
    idir.mkdir()
    ldir.mkdir()
    for n in images:
        Image.new("RGB", (200, 100)).save(idir / n)
    for n, text in files.items():
        (ldir / n).write_text(text)
    return ldir, idir


def test_yolo_labels_empty_and_absent_files_are_images_without_objects(tmp_path):
    ldir, idir = yolo(tmp_path, {"a.txt": "2 0.5 0.5 0.2 0.4\n0 0.1 0.1 0.1 0.1\n",
                                 "b.txt": ""})
    lab = load_yolo_labels(ldir, idir, n_classes=3, class_names=NAMES)
    assert lab.file_names == ["a.png", "b.png", "c.png"]
    assert lab.boxes[0][0].tolist() == pytest.approx([80, 30, 120, 70])
    assert [len(c) for c in lab.classes] == [2, 0, 0]


@pytest.mark.parametrize("files, match", [
    ({"a.txt": "3 0.5 0.5 0.2 0.2"}, "class id beyond the model's 3 classes"),
    ({"a.txt": "0 0.95 0.5 0.2 0.2"}, "box outside its image"),
    ({"a.txt": "0 0.5 0.5 0.2"}, "malformed label line"),
    ({"zzz.txt": "0 0.5 0.5 0.2 0.2"}, "name images that are not there"),
    ({}, "holds no .txt label files"),
])
def test_bad_yolo_labels_are_one_clear_error(tmp_path, files, match):
    ldir, idir = yolo(tmp_path, files)
    with pytest.raises(DataError, match=match) as e:
        load_yolo_labels(ldir, idir, n_classes=3)
    assert "Fix:" in str(e.value)


def test_evaluate_and_label_free_metrics(tmp_path):
    lab = load_coco_labels(coco(tmp_path), class_names=NAMES, image_dir=tmp_path)
    perfect = [Detections(lab.boxes[i], np.full(len(lab.classes[i]), 0.9), lab.classes[i])
               for i in range(len(lab))]
    m = evaluate(lab, perfect)
    assert m.map == pytest.approx(1.0) and m.map50 == pytest.approx(1.0)
    assert m.per_class["figure"]["ap"] == pytest.approx(1.0)
    assert m.per_class["title"]["n_gt"] == 0 and np.isnan(m.per_class["title"]["ap"])
    shifted = [Detections(d.boxes + np.array([3, 0, 3, 0], np.float32), d.scores, d.classes)
               for d in perfect]
    lf = evaluate_label_free(perfect, shifted, lab.heights, lab.widths, NAMES,
                             gt_score_min=0.5)
    assert lf.recall50 == 1.0 and lf.n_reference_boxes == 2
    # IoU of a 30 x 20 box shifted 3 px: 27 / 33; of a 100 x 40 box clipped... not clipped here
    assert lf.mean_iou == pytest.approx(np.mean([27 * 20 / (33 * 20), 97 * 40 / (103 * 40)]))
    assert lf.vs_fp32.map < 1.0 and lf.vs_fp32.map50 == pytest.approx(1.0)
    with pytest.raises(DataError, match="one detection list per labelled image"):
        evaluate(lab, perfect[:1])
