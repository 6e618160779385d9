"""Why the backend check cannot hold an FP16 artifact run on ONNX Runtime CPU to the
artifact's own numbers: ORT wraps FP16 ops it has no CPU kernel for in Casts and its
mandatory cast handling (InsertCastTransformer and its duplicate-cast removal, on at every
optimization level, ORT_DISABLE_ALL included) then removes the artifact's own Casts too and
folds the FP16 constants back to FP32 ("FusedBack_*"): a run of FP16 ops without CPU
kernels computes entirely in FP32. ORT's run of the artifact is the FP32 model there; the
emulation keeps the FP16 rounding the artifact specifies (and TensorRT computes)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.precision.plan import NodeDecision, Plan
from quantkit.qdq.casts import convert_fp16, emulate_fp16

D = 64


def add_then_layernorm():
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["x", "c"], ["s"], name="add"),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln",
                              axis=-1, epsilon=1e-5)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, ["N", D])],
                          [helper.make_tensor_value_info("y", f, ["N", D])],
                          [numpy_helper.from_array(np.full(D, 0.1, np.float32), "c"),
                           numpy_helper.from_array(np.ones(D, np.float32), "g"),
                           numpy_helper.from_array(np.zeros(D, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    plan = Plan({"add": NodeDecision("fp16", "remainder"), "ln": NodeDecision("fp32", "rule")})
    return m, plan


def layernorm(s):
    s = s.astype(np.float64)
    mu = s.mean(-1, keepdims=True)
    return (s - mu) / np.sqrt(((s - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("level", ["disable", "all"])
def test_ort_drops_the_fp16_rounding_the_emulation_keeps(level):
    m, plan = add_then_layernorm()
    x = (np.random.default_rng(0).standard_normal((8, D)) * 300).astype(np.float32)
    # the FP16 Add reads x and c rounded to FP16; its sum is FP16 in the artifact
    s32 = x.astype(np.float16).astype(np.float32) + np.float32(np.float16(0.1))
    s16 = s32.astype(np.float16).astype(np.float32)  # what the artifact specifies
    with OrtRunner(convert_fp16(m, plan), graph_optimization_level=level) as r:
        artifact = r.infer({"x": x})["y"]
    with OrtRunner(emulate_fp16(m, plan), graph_optimization_level=level) as r:
        emulated = r.infer({"x": x})["y"]
    assert np.abs(layernorm(s16) - layernorm(s32)).max() > 1e-4  # the rounding matters here
    np.testing.assert_allclose(emulated, layernorm(s16), atol=2e-5)  # the artifact's semantics
    # ORT's run of the artifact: no FP16 rounding anywhere, the FP32 model's numbers
    np.testing.assert_allclose(artifact, layernorm(x.astype(np.float64) + 0.1), atol=2e-5)
    assert np.abs(artifact - emulated).max() > 1e-4
