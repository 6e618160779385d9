"""Exact Q/DQ execution on ONNX Runtime CPU: ``qdq_mode="exact"`` computes
QuantizeLinear -> DequantizeLinear -> float MatMul as written; ORT's fused x86 integer
kernels (``qdq_mode="fused"``) saturate on CPUs without VNNI. Real ORT sessions on a graph
built in code, with inputs chosen to make u8s8 pair sums exceed int16."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import (QDQ_MODES, OrtRunner, evaluation_qdq_mode,
                                   fused_int8_is_exact, kernel_census, open_exact_qdq,
                                   qdq_mode_note, qdq_session_config)
from quantkit.environment import cpu_isa
from quantkit.errors import BackendError

K, N = 64, 32
X_SCALE = np.float32(1.0 / 127)
W_SCALE = np.full(N, 1.0 / 127, np.float32)


def saturating_weight() -> np.ndarray:
    """+-1 weights (int8 +-127); the first half of the columns all +1, so adjacent u8 x s8
    products (255 x 127 each after ORT's int8 -> uint8 shift) add past 32767."""
    w = np.where(np.random.default_rng(0).random((K, N)) < 0.5, -1.0, 1.0).astype(np.float32)
    w[:, : N // 2] = 1.0
    return w


def qdq_weighted(op: str, name: str, w: np.ndarray, axis: int,
                 spatial: tuple[int, ...] = ()) -> onnx.ModelProto:
    """x [M, K, *spatial] and weight ``w`` each through QuantizeLinear -> DequantizeLinear
    (int8, x per tensor, w per channel on ``axis``) into one ``op`` node -> y [M, N, *spatial]."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("QuantizeLinear", ["W", "sw", "zw"], ["wq"], axis=axis),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=axis),
             helper.make_node(op, ["xd", "wd"], ["y"], name=name)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K, *spatial])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", N, *spatial])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array(X_SCALE), "sx"),
         numpy_helper.from_array(np.array(0, np.int8), "zx"),
         numpy_helper.from_array(W_SCALE, "sw"),
         numpy_helper.from_array(np.zeros(N, np.int8), "zw")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def qdq_matmul(w: np.ndarray) -> onnx.ModelProto:
    return qdq_weighted("MatMul", "mm", w, axis=1)


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The Q/DQ semantics in numpy: round half to even, saturate, dequantize, float64 GEMM."""
    def fake_quant(v, s):
        return np.clip(np.rint(v / s), -128, 127) * s

    return fake_quant(x.astype(np.float64), X_SCALE) @ fake_quant(w.astype(np.float64),
                                                                  W_SCALE[None, :])


def feed() -> np.ndarray:
    x = np.ones((4, K), np.float32)  # every activation at +amax (int8 127)
    x[1] = -1.0
    x[2] = np.random.default_rng(1).uniform(-1, 1, K)
    x[3] = 0.9
    return x


def run(model, tmp_path, mode: str) -> tuple[np.ndarray, dict[str, int]]:
    opt = tmp_path / f"opt_{mode}.onnx"
    with OrtRunner(model, qdq_mode=mode, save_optimized_to=opt) as r:
        y = r.infer({"x": feed()})["y"]
    return y, kernel_census(opt)


def test_exact_mode_computes_the_qdq_semantics(tmp_path):
    w = saturating_weight()
    y, census = run(qdq_matmul(w), tmp_path, "exact")
    ref = reference(feed(), w)
    # float32 GEMM of K=64 exact products: only summation-order rounding differs
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4 * np.abs(ref).max())
    assert census.get("MatMul") == 1 and "MatMulIntegerToFloat" not in census


def test_open_exact_qdq_is_the_exact_mode(tmp_path):
    w = saturating_weight()
    with open_exact_qdq(qdq_matmul(w)) as r:
        y = r.infer({"x": feed()})["y"]
        assert r.session_config == {"session.disable_quant_qdq": "1"}
    np.testing.assert_allclose(y, reference(feed(), w), rtol=0, atol=1e-3)
    with pytest.raises(BackendError, match="exact Q/DQ sessions only"):
        open_exact_qdq(qdq_matmul(w), qdq_mode="fused")


def test_fused_kernels_fuse_and_differ_where_u8s8_saturates(tmp_path):
    w = saturating_weight()
    fused, census = run(qdq_matmul(w), tmp_path, "fused")
    exact, _ = run(qdq_matmul(w), tmp_path, "exact")
    assert census.get("com.microsoft.MatMulIntegerToFloat") == 1 or \
        census.get("MatMulIntegerToFloat") == 1, census
    diff = float(np.abs(fused - exact).max())
    if fused_int8_is_exact(cpu_isa()):
        # VNNI / AMX sum int8 products in int32: fused agrees with exact to float rounding
        assert diff <= 1e-3, diff
    else:
        # AVX2 (this AMD EPYC host): the all-127 rows saturate by far more than rounding
        assert diff > 1.0, diff
    # control: int8 weights within +-64 keep every u8 x s8 pair sum inside int16
    # (2 x 255 x 64 = 32640), so the fused kernels agree with exact Q/DQ on every host
    small = np.clip(w * 0.5, -64 / 127, 64 / 127).astype(np.float32)
    fused_small, _ = run(qdq_matmul(small), tmp_path, "fused")
    np.testing.assert_allclose(fused_small, reference(feed(), small), rtol=0, atol=1e-3)


def test_modes_and_unknown_mode():
    assert qdq_session_config("fused") == {}
    assert qdq_session_config("exact") == {"session.disable_quant_qdq": "1"}
    assert qdq_session_config("integer") == {"session.x64quantprecision": "1"}
    assert set(QDQ_MODES) == {"fused", "exact", "integer"}
    with pytest.raises(BackendError, match="unknown Q/DQ execution mode"):
        OrtRunner(qdq_matmul(saturating_weight()), qdq_mode="fast")


def test_integer_mode_keeps_integer_kernels_and_accumulates_exactly(tmp_path):
    w = saturating_weight()
    y, census = run(qdq_matmul(w), tmp_path, "integer")
    assert any(k.endswith("MatMulIntegerToFloat") for k in census), census
    np.testing.assert_allclose(y, reference(feed(), w), rtol=0, atol=1e-3)


def test_session_config_entries_reach_ort(tmp_path):
    """An extra config entry is applied: qdqisint8allowed keeps int8 activations (s8s8
    kernels), which also removes the u8 shift that saturates."""
    w = saturating_weight()
    with OrtRunner(qdq_matmul(w), session_config={"session.qdqisint8allowed": "1"}) as r:
        assert r.session_config == {"session.qdqisint8allowed": "1"}
        y = r.infer({"x": feed()})["y"]
    np.testing.assert_allclose(y, reference(feed(), w), rtol=0, atol=1e-3)


def test_isa_facts():
    assert not fused_int8_is_exact(["avx2"])
    assert not fused_int8_is_exact(["avx2", "avx512f", "avx512bw"])
    assert fused_int8_is_exact(["avx2", "avx512f", "avx512_vnni"])
    assert fused_int8_is_exact(["avx2", "avx_vnni"])
    assert fused_int8_is_exact(["amx_tile", "amx_int8"])


def test_evaluation_mode_per_target_and_notes():
    assert evaluation_qdq_mode("tensorrt") == "exact"
    assert evaluation_qdq_mode("ort_cpu") == "fused"
    with pytest.raises(BackendError, match="unknown deployment target"):
        evaluation_qdq_mode("tflite")
    assert "saturate" in qdq_mode_note("fused", ["avx2"]) and "avx2" in qdq_mode_note("fused", ["avx2"])
    assert "exactly (VNNI" in qdq_mode_note("fused", ["avx2", "avx512_vnni"])
    assert "every host" in qdq_mode_note("exact", ["avx2"])
    with pytest.raises(BackendError):
        qdq_mode_note("fast", ["avx2"])


def qdq_conv1x1(w: np.ndarray) -> onnx.ModelProto:
    """The same saturating weights as a 1x1 Conv (ORT fuses it into QLinearConv)."""
    return qdq_weighted("Conv", "conv", w.T.reshape(N, K, 1, 1).copy(), axis=0, spatial=(2, 2))


@pytest.mark.parametrize("mode", ["exact", "integer"])
def test_conv_exact_and_integer_modes_compute_the_qdq_semantics(mode):
    w = saturating_weight()
    x = np.repeat(np.repeat(feed()[:, :, None, None], 2, axis=2), 2, axis=3)
    with OrtRunner(qdq_conv1x1(w), qdq_mode=mode) as r:
        y = r.infer({"x": x})["y"]
    ref = reference(feed(), w)  # a 1x1 Conv is the MatMul at every pixel
    np.testing.assert_allclose(y[:, :, 0, 0], ref, rtol=0, atol=1e-3)
    np.testing.assert_allclose(y[:, :, 1, 1], ref, rtol=0, atol=1e-3)
