"""A detector's bad inputs through the real CLI (``python -m quantkit``): each is one line on
stderr naming the problem, where, the offending value and a fix that works; exit code 2; and
nothing half-written in the run dir (Hydra's ``.hydra/`` and the log only). The last case
(label-free images on which FP32 finds no box at the ground-truth score) is refused after
FP32's reference run, before any candidate is built."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.assets import asset_path, cache_root

PHOTOS = ("astronaut.png", "coffee.png", "camera.png")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    src = Path(asset_path("skimage_photos", cache_root()))
    out = tmp_path_factory.mktemp("photos")
    for f in sorted(src.iterdir()):
        if f.suffix in (".png", ".jpg"):
            shutil.copy(f, out / f.name)
    return out


def _classifier(path: Path) -> Path:
    """A real image classifier: [N, 3, 32, 32] -> GlobalAveragePool -> Gemm -> [N, 10]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(size=(10, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(10, np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
         helper.make_node("Flatten", ["p"], ["f"]),
         helper.make_node("Gemm", ["f", "w", "b"], ["logits"], transB=1)],
        "cls", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _coco(path: Path, photos: Path, *, names=PHOTOS, box=(10.0, 10.0, 50.0, 40.0)) -> Path:
    images = [{"id": i + 1, "file_name": n, "height": 512, "width": 512}
              for i, n in enumerate(names)]
    anns = [{"id": 1, "image_id": 1, "category_id": 2, "bbox": list(box), "area": 1.0,
             "iscrowd": 0}]
    cats = [{"id": 1, "name": "FEMALE_GENITALIA_COVERED"}, {"id": 2, "name": "FACE_FEMALE"}]
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}),
                    encoding="utf-8")
    return path


NUDENET = ["model=nudenet_320n", "data=detection_folder"]


def _cases(root: Path, photos: Path) -> dict[str, tuple[list[str], list[str]]]:
    """id -> (overrides, fragments of the one-line error: problem, value, fix)."""
    yolo = root / "yolo"
    yolo.mkdir()
    (yolo / "astronaut.txt").write_text("40 0.5 0.5 0.2 0.2\n", encoding="utf-8")
    empty = root / "empty.json"
    empty.write_text("", encoding="utf-8")
    return {
        "decoder_on_a_classifier": (
            ["model=onnx", f"model.path={_classifier(root / 'cls.onnx')}",
             "model.output.kind=detection", "model.output.decoder=yolov8",
             "data=detection_folder", f"data.path={photos}"],
            ["decoder yolov8", "does not fit", "logits float32[N, 10]",
             "a [B, C] output is a classifier's logits; use model.output.kind=logits"]),
        "decoder_layout_does_not_fit": (
            ["model=layout_cdla", "model.output.decoder=yolov8", "data=layout_pages"],
            ["decoder yolov8", "does not fit", "float32[1,", "use model.output.decoder=gfl"]),
        "labels_name_missing_images": (
            [*NUDENET, f"data.path={photos}",
             f"data.labels={_coco(root / 'missing.json', photos, names=(*PHOTOS, 'gone.png'))}"],
            ["the labels name 1 image(s) that are not there", "gone.png",
             "put the images in"]),
        "box_outside_its_image": (
            [*NUDENET, f"data.path={photos}",
             f"data.labels={_coco(root / 'outside.json', photos, box=(400, 10, 300, 40))}"],
            ["1 box(es) outside their image", "astronaut.png box 0", "512x512",
             "boxes are x1 < x2 <= width"]),
        "class_id_beyond_the_model": (
            [*NUDENET, f"data.path={photos}", f"data.labels={yolo}"],
            ["class id beyond the model's 18 classes", "astronaut.txt:1", "got 40",
             "class ids are 0..17"]),
        "empty_labels_file": (
            [*NUDENET, f"data.path={photos}", f"data.labels={empty}"],
            ["the labels file is empty", "0 bytes", "write the COCO JSON"]),
        "label_free_with_no_reference_box": (
            [*NUDENET, f"data.path={photos}", "model.output.gt_score_min=0.99"],
            ["FP32 detects nothing at or above model.output.gt_score_min", "got 0.99",
             "lower model.output.gt_score_min"]),
    }


CASE_IDS = ["decoder_on_a_classifier", "decoder_layout_does_not_fit",
            "labels_name_missing_images", "box_outside_its_image", "class_id_beyond_the_model",
            "empty_labels_file", "label_free_with_no_reference_box"]


@pytest.mark.parametrize("case", CASE_IDS)
def test_bad_detection_input_is_one_clear_line(case, photos, tmp_path):
    overrides, fragments = _cases(tmp_path, photos)[case]
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "quantkit", *overrides, "progress=false",
                        f"hydra.run.dir={run_dir}"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("quantkit: error: "), r.stderr[-2000:]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    left = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*")
                  if p.relative_to(run_dir).parts[0] != ".hydra" and p.suffix != ".log")
    assert left == [], left
