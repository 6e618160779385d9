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
