"""The vectorized NMS equals textbook greedy NMS (a Python loop) class-wise, agnostic and with
rapid-layout's per-class caps; and the preprocessing's way back to original pixels."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.errors import ConfigError, DataError
from quantkit.tasks.detection.nms import greedy_keep, nms
from quantkit.tasks.detection.preprocess import DetectionPreprocess, family_preprocess


def loop_greedy(boxes, scores, thr):
    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / u if u > 0 else 0.0

    keep = []
    for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
        if all(iou(boxes[i], boxes[k]) <= thr for k in keep):
            keep.append(i)
    return keep


def crowded(rng, n):
    """Many overlapping boxes (long suppression chains)."""
    c = rng.uniform(0, 100, (n, 2))
    wh = rng.uniform(10, 40, (n, 2))
    return np.concatenate([c, c + wh], 1).astype(np.float32), rng.random(n).astype(np.float32)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_fixed_point_equals_the_loop(seed):
    rng = np.random.default_rng(seed)
    boxes, scores = crowded(rng, 300)
    order = np.argsort(-scores, kind="stable")
    keep = greedy_keep(boxes[order], 0.5)
    assert sorted(order[keep].tolist()) == sorted(loop_greedy(boxes, scores, 0.5))


def test_classwise_agnostic_and_caps():
    rng = np.random.default_rng(7)
    boxes, scores = crowded(rng, 400)
    classes = rng.integers(0, 3, 400)
    got = nms(boxes, scores, classes, iou_threshold=0.45, max_det=60)
    ref = []
    for c in range(3):
        idx = np.flatnonzero(classes == c)
        ref += idx[loop_greedy(boxes[idx], scores[idx], 0.45)].tolist()
    ref = sorted(ref, key=lambda i: (-scores[i], i))[:60]
    assert got.tolist() == ref
    agn = nms(boxes, scores, classes, iou_threshold=0.45, agnostic=True)
    assert sorted(agn.tolist()) == sorted(loop_greedy(boxes, scores, 0.45))
    capped = nms(boxes, scores, classes, iou_threshold=0.45, per_class_candidates=50,
                 per_class_max=5)
    assert all(np.count_nonzero(classes[capped] == c) <= 5 for c in range(3))
    for c in range(3):
        idx = np.flatnonzero(classes == c)
        top = idx[np.argsort(-scores[idx], kind="stable")[:50]]
        expect = top[loop_greedy(boxes[top], scores[top], 0.45)][:5]
        assert sorted(capped[classes[capped] == c].tolist()) == sorted(expect.tolist())


def test_nms_edge_cases():
    assert nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0), iou_threshold=0.5).size == 0
    same = np.array([[0, 0, 10, 10]] * 3, np.float32)
    assert nms(same, np.array([0.5, 0.5, 0.5]), np.zeros(3), iou_threshold=0.5).tolist() == [0]


def test_letterbox_maps_boxes_back_to_original_pixels():
    pre = DetectionPreprocess(height=320, width=320, resize="letterbox")
    img = np.zeros((200, 400, 3), np.uint8)
    img[50:100, 100:300] = 255  # a white box at x 100..300, y 50..100
    x, (t,) = pre([img])
    assert x.shape == (1, 3, 320, 320)
    assert (t.scale_x, t.scale_y, t.pad_x, t.pad_y) == (0.8, 0.8, 0.0, 80.0)
    inside = x[0, 0] > 0.5
    ys, xs = np.nonzero(inside)
    box_in = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    back = t.to_original(box_in)
    assert np.allclose(back, [[100, 50, 300, 100]], atol=1.5)
    assert np.allclose(t.to_original(t.to_input(np.array([[1, 2, 30, 40]]))), [[1, 2, 30, 40]],
                       atol=1e-4)
    assert float(x[0, 0, 0, 0]) == pytest.approx(114 / 255)  # the pad value


def test_plain_resize_and_channel_order_and_top_left():
    pre = family_preprocess("gfl", 800, 608)
    img = np.zeros((1600, 1216, 3), np.uint8)
    img[..., 2] = 255  # blue
    x, (t,) = pre([img])
    assert (t.scale_x, t.scale_y) == (0.5, 0.5)
    # BGR: channel 0 is blue, normalized with the first mean/std (as rapid-layout does)
    assert float(x[0, 0, 10, 10]) == pytest.approx((1.0 - 0.485) / 0.229, rel=1e-5)
    nud = family_preprocess("nudenet", 320, 320)
    x2, (t2,) = nud([np.full((400, 600, 3), 200, np.uint8)])
    assert (t2.pad_x, t2.pad_y) == (0.0, 0.0) and t2.scale_x == t2.scale_y == 320 / 600
    assert float(x2[0, 0, -1, 0]) == 0.0  # padded bottom: black
    back = t2.to_original(np.array([[0, 0, 320, 320]]))
    assert np.allclose(back, [[0, 0, 600, 400]])  # clipped to the image


def test_preprocess_errors():
    with pytest.raises(ConfigError, match="resize"):
        DetectionPreprocess(height=10, width=10, resize="crop")
    with pytest.raises(DataError, match="uint8"):
        DetectionPreprocess(height=10, width=10)([np.zeros((4, 4, 3), np.float32)])
    with pytest.raises(ConfigError, match="input size must be known"):
        family_preprocess("yolov8", None, 640)
