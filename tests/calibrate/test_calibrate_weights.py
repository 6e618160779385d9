"""Per-channel weight ranges and the output-channel axis rule (TRT_RULES.md rule 3)."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.graph.grids import ALL_ZERO_AMAX
from quantkit.graph.weights import weight_amax_per_channel, weight_axis
from quantkit.errors import CalibrationError


@pytest.mark.parametrize("op, ndim, attrs, index, axis", [
    ("Conv", 4, {}, 1, 0),
    ("Conv", 3, {}, 1, 0),
    ("ConvTranspose", 4, {}, 1, 1),
    ("Gemm", 2, {"transB": 1}, 1, 0),
    ("Gemm", 2, {"transB": 0}, 1, 1),
    ("Gemm", 2, {}, 1, 1),
    ("Gemm", 2, {"transA": 1}, 0, 1),
    ("Gemm", 2, {}, 0, 0),
    ("MatMul", 2, {}, 1, 1),
    ("MatMul", 3, {}, 1, 2),
    ("MatMul", 2, {}, 0, 0),
])
def test_weight_axis(op, ndim, attrs, index, axis):
    assert weight_axis(op, ndim, attrs, input_index=index) == axis


@pytest.mark.parametrize("op, ndim", [("MatMul", 1), ("Gemm", 3), ("Relu", 2), ("Conv", 0)])
def test_weight_axis_rejects(op, ndim):
    with pytest.raises(CalibrationError):
        weight_axis(op, ndim, {})


def test_per_channel_amax_conv_and_linear():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[5] = 0.0
    amax = weight_amax_per_channel(w, weight_axis("Conv", 4, {}))
    expected = np.abs(w).reshape(8, -1).max(axis=1)
    expected[5] = ALL_ZERO_AMAX
    np.testing.assert_array_equal(amax, expected)
    assert amax.dtype == np.float32 and (amax > 0).all()

    linear = rng.standard_normal((16, 4)).astype(np.float32)  # Gemm transB=1: [N, K]
    np.testing.assert_array_equal(weight_amax_per_channel(linear, 0), np.abs(linear).max(axis=1))
    np.testing.assert_array_equal(weight_amax_per_channel(linear, -1), np.abs(linear).max(axis=0))
    assert weight_amax_per_channel(np.array([-2.0, 0.0]), 0).tolist() == [2.0, ALL_ZERO_AMAX]


def test_per_channel_amax_errors():
    with pytest.raises(CalibrationError, match="non-finite"):
        weight_amax_per_channel(np.array([[1.0, np.nan]]), 0)
    with pytest.raises(CalibrationError, match="axis"):
        weight_amax_per_channel(np.ones((2, 2)), 2)
