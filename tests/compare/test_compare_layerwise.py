"""compare/layerwise.py: the debug run's fetch chunks."""

from __future__ import annotations

import pytest

from quantkit.compare.layer_diff import output_chunks


@pytest.mark.parametrize("n, k, sizes", [(98, 64, [49, 49]), (130, 64, [44, 43, 43]),
                                         (64, 64, [64]), (5, None, [5]), (5, 1, [1] * 5),
                                         (7, 3, [3, 2, 2])])
def test_chunks_are_the_fewest_and_nearly_equal(n, k, sizes):
    names = [f"t{i}" for i in range(n)]
    chunks = output_chunks(names, k)
    assert [len(c) for c in chunks] == sizes
    assert [t for c in chunks for t in c] == names  # every tensor once, in order


def test_no_tensors_is_one_empty_chunk():
    assert output_chunks([], 64) == [[]]


class _Fixed:
    """A runner returning fixed arrays (the reference or the candidate of one batch)."""

    def __init__(self, arrays):
        self.arrays = arrays

    def infer(self, feed, names):
        return {n: self.arrays[n] for n in names}


def test_a_packed_output_is_compared_whole_and_by_channel_range():
    """YOLOv8's [B, 4 + C, N]: boxes in input pixels, scores in 0..1. Scores drowned in noise
    hide behind exact boxes in the whole tensor; by range they show."""
    import numpy as np

    from quantkit.compare.layer_diff import diff_layers, part_key

    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.uniform(0, 640, (2, 4, 300)), rng.uniform(0, 1, (2, 18, 300)) ** 8],
                         axis=1).astype(np.float32)
    cand = ref.copy()
    cand[:, 4:] += rng.normal(0, 0.2, cand[:, 4:].shape).astype(np.float32)  # noisy scores
    parts = {"out": {"boxes": (1, 0, 4), "scores": (1, 4, None)}}
    got = diff_layers(_Fixed({"out": ref}), {"c": _Fixed({"out": cand})}, [{}], {"c": ["out"]},
                      parts=parts)["c"]
    assert list(got) == ["out", part_key("out", "boxes"), part_key("out", "scores")]
    assert got["out[boxes]"]["cosine"] == pytest.approx(1.0)
    assert got["out"]["cosine"] > 0.9999
    assert got["out[scores]"]["cosine"] < 0.8
    assert got["out[scores]"]["count"] == 2 * 18 * 300
