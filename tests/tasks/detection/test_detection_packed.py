"""PackedDetections: a split's detections as two arrays, cut the way logits are cut (the
first n images, any images with repeats), round-tripping through the stage cache's arrays."""

from __future__ import annotations

import numpy as np

from quantkit.tasks.detection.boxes import Detections, empty_detections
from quantkit.tasks.detection.packed import PackedDetections


def _dets(k: int, seed: int) -> Detections:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 50, (k, 2))
    return Detections(np.concatenate([xy, xy + 10], axis=1), rng.uniform(0, 1, k),
                      rng.integers(0, 5, k))


def test_pack_slice_index_and_arrays_round_trip():
    images = [_dets(3, 0), empty_detections(), _dets(1, 1), _dets(4, 2)]
    p = PackedDetections.of(images)
    assert len(p) == 4 and p.n_detections == 8
    for a, b in zip(p.to_list(), images):
        assert np.array_equal(a.boxes, b.boxes) and np.array_equal(a.classes, b.classes)
    head = p[:2]
    assert len(head) == 2 and head.n_detections == 3
    picked = p[[3, 3, 1]]  # repeats, as a bootstrap or a dev half draws them
    assert len(picked) == 3 and picked.n_detections == 8
    assert np.array_equal(picked.image(1).scores, images[3].scores)
    back = PackedDetections.from_arrays(p.arrays())
    assert np.array_equal(back.rows, p.rows) and np.array_equal(back.offsets, p.offsets)
    assert len(PackedDetections.of([])) == 0
