import numpy as np
import pytest

from quantkit.errors import GraphEditError
from quantkit.qdq.scales import fake_quantize, int8_scale, weight_amax_per_channel, weight_axis


@pytest.mark.parametrize("op, rank, trans_b, axis", [
    ("Conv", 4, 0, 0), ("ConvTranspose", 4, 0, 1), ("Gemm", 2, 1, 0), ("Gemm", 2, 0, 1),
    ("MatMul", 2, 0, 1), ("MatMul", 3, 0, 2)])
def test_weight_axis_follows_trt_rule_3(op, rank, trans_b, axis):
    assert weight_axis(op, rank, {"transB": trans_b}) == axis


def test_weight_axis_rejects_other_ops():
    with pytest.raises(GraphEditError, match="Relu"):
        weight_axis("Relu", 2)


def test_per_channel_amax_is_max_abs_over_other_axes():
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 12
    np.testing.assert_array_equal(weight_amax_per_channel(w, 1), np.abs(w).max(axis=(0, 2)))
    assert weight_amax_per_channel(w, 1).shape == (3,)


def test_int8_scale_is_amax_over_127_and_never_zero():
    np.testing.assert_allclose(int8_scale(np.array([12.7, 0.0])), [0.1, 1 / 127], rtol=1e-6)
    assert int8_scale(2.54).dtype == np.float32 and int8_scale(2.54).shape == ()


@pytest.mark.parametrize("bad", [np.inf, np.nan, -1.0])
def test_int8_scale_rejects_nonfinite_or_negative_amax(bad):
    with pytest.raises(GraphEditError, match="amax"):
        int8_scale(bad)


def test_fake_quantize_saturates_and_rounds_to_grid():
    x = np.array([-3.0, -0.04, 0.06, 0.5, 9.0], dtype=np.float32)
    np.testing.assert_allclose(fake_quantize(x, np.float32(0.01)), [-1.28, -0.04, 0.06, 0.5, 1.27],
                               atol=1e-6)
