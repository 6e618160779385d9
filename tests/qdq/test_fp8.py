"""FP8 E4M3 Q/DQ: ONNX Runtime CPU (exact Q/DQ) equals the numpy reference bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import GraphEditError
from quantkit.qdq.fp8 import (FP8_DTYPE, FP8_E4M3_MAX, dequantize_fp8, fp8_scale,
                              quantize_fp8)


def _qdq_session(shape, scale, axis):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT8E4M3FN, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s"),
             numpy_helper.from_array(np.zeros(np.shape(scale), FP8_DTYPE), "z")]
    kw = {"axis": axis} if axis is not None else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **kw)]
    m = helper.make_model(helper.make_graph(nodes, "fp8", [x], [q, y], inits),
                          opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _hard_tensor(rng, shape, amax):
    """Random values in +-2 amax (beyond the +-448 grid after scaling), values at FP8
    subnormal magnitudes (below 2**-6 * scale) and ties, +-inf and NaN."""
    x = rng.uniform(-2 * amax, 2 * amax, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    n = flat.size
    scale = float(np.max(amax)) / FP8_E4M3_MAX
    idx = rng.choice(n, size=n // 2, replace=False)
    sub = rng.integers(-16, 17, size=idx.size) * (scale * 2.0 ** -10)  # subnormals and ties
    flat[idx[: idx.size // 2]] = sub[: idx.size // 2]
    flat[idx[-4:]] = [np.nan, -np.nan, np.inf, -np.inf]
    return x


@pytest.mark.parametrize("shape,axis", [((64, 33), None), ((8, 5, 7), 0), ((16, 12), 1)])
def test_ort_fp8_qdq_matches_reference_bit_for_bit(shape, axis):
    rng = np.random.default_rng(len(shape) * 7 + (axis or 0))
    if axis is None:
        amax = np.float32(3.0)
        scale = fp8_scale(amax)
    else:
        amax = rng.uniform(0.01, 10.0, size=shape[axis]).astype(np.float32)
        scale = fp8_scale(amax)
    x = _hard_tensor(rng, shape, amax if axis is None else
                     amax.reshape([-1 if i == axis else 1 for i in range(len(shape))]))
    q_ort, y_ort = _qdq_session(list(shape), scale, axis).run(None, {"x": x})
    q_ref = quantize_fp8(x, scale, axis)
    y_ref = dequantize_fp8(q_ref, scale, axis)
    assert np.array_equal(q_ort.view(np.uint8), q_ref.view(np.uint8))
    assert np.array_equal(y_ort.view(np.uint32), y_ref.view(np.uint32))
    # the tensor really exercised saturation, subnormals and NaN
    qf = q_ref.astype(np.float32)
    assert np.any(np.abs(qf) == FP8_E4M3_MAX) and np.any(np.isnan(qf))
    assert np.any((qf != 0) & (np.abs(qf) < 2.0 ** -6))


def test_reference_rounds_to_nearest_even_and_saturates():
    x = np.array([2.0 ** -10, 3 * 2.0 ** -10, 1.0625, 1.1875, 460.0, 1e9, -np.inf, np.nan],
                 np.float32)
    q = quantize_fp8(x, np.float32(1.0)).astype(np.float32)
    # ties: 2^-10 -> 0 (even), 3*2^-10 -> 2^-8 (even), 1.0625 -> 1.0, 1.1875 -> 1.25
    assert q[:4].tolist() == [0.0, 2.0 ** -8, 1.0, 1.25]
    assert q[4:7].tolist() == [448.0, 448.0, -448.0] and np.isnan(q[7])


def test_fp8_scale_refuses_nonfinite_amax():
    assert fp8_scale(448.0) == np.float32(1.0) and fp8_scale(0.0) == np.float32(1 / 448)
    with pytest.raises(GraphEditError, match="amax"):
        fp8_scale(float("inf"))
