"""precision.fp8_rules: which quantized nodes an FP8 plan writes in FP8 E4M3 (GEMMs, and
convolutions TensorRT has FP8 kernels for: ModelOpt's FP8 Conv rule), and fp8_plan keeping
the others in the remainder precision with the reason."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.precision.fp8_rules import fp8_exclusion
from quantkit.precision.plan import Precision, build_plan
from quantkit.run.fp8_source import fp8_plan


def test_gemms_and_wide_small_filter_convs_run_fp8():
    assert fp8_exclusion("MatMul", (384, 1536)) is None
    assert fp8_exclusion("MatMul", None) is None  # attention BMM: two activations
    assert fp8_exclusion("Gemm", (1280, 64)) is None
    assert fp8_exclusion("Conv", (64, 32, 1, 1)) is None
    assert fp8_exclusion("Conv", (96, 32, 3, 3)) is None  # 9 taps
    assert fp8_exclusion("Conv", (17, 17, 5, 5)) is None  # 25 taps, 17 channels


def test_depthwise_small_channel_large_filter_and_non_gemm_ops_stay_out_of_fp8():
    assert "depthwise" in fp8_exclusion("Conv", (32, 1, 3, 3))
    assert "16 output" in fp8_exclusion("Conv", (16, 96, 1, 1))  # <= 16: ModelOpt's bound
    assert "3 input" in fp8_exclusion("Conv", (32, 3, 3, 3))  # an RGB stem
    assert "49 taps" in fp8_exclusion("Conv", (64, 64, 7, 7))
    assert "constant weight" in fp8_exclusion("Conv", None)
    assert "GEMMs and convolutions" in fp8_exclusion("Relu", None)


def _cnn() -> onnx.ModelProto:
    """x[N,32,8,8] -> depthwise 3x3 (32 groups) -> Relu -> pointwise 1x1 (32 -> 64)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(32, 1, 3, 3)).astype(np.float32), "wd"),
             numpy_helper.from_array(rng.normal(size=(64, 32, 1, 1)).astype(np.float32), "wp")]
    nodes = [helper.make_node("Conv", ["x", "wd"], ["d"], name="dw", group=32, pads=[1] * 4),
             helper.make_node("Relu", ["d"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wp"], ["y"], name="pw")]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def test_fp8_plan_writes_the_pointwise_conv_in_fp8_and_keeps_the_depthwise_one_fp16():
    model = _cnn()
    plan = build_plan(model, amax={"x": 3.0, "r": 5.0}, skip_small=False)
    assert sorted(plan.int8_nodes()) == ["dw", "pw"]
    out = fp8_plan(plan, "fp8.minmax", model, "fp16")
    assert out.nodes_with(Precision.FP8) == ["pw"]
    assert out.decisions["dw"].precision is Precision.FP16
    assert "depthwise Conv with 32 output / 1 input channels" in out.decisions["dw"].reason
    assert not out.int8_nodes()
