"""A candidate's estimated GEMM time (precision/plan_cost.py) on a real small graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.graph.facts import tensor_infos
from quantkit.precision.plan import build_plan
from quantkit.precision.plan_cost import estimate_plan, gemm_shapes


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(size=(768, 3072)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(3072, 768)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="ffn1"),
             helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="ffn2")]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["batch", "seq", 768])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_gemm_shapes_fill_symbolic_dims_with_batch_and_length():
    m = _mlp()
    shapes = gemm_shapes(m, tensor_infos(m), batch=32, length=128)
    assert shapes == {"ffn1": ("MatMul", (4096, 768, 3072)), "ffn2": ("MatMul", (4096, 3072, 768))}


@pytest.mark.parametrize("gpu", [90, "L4"])
def test_a_plan_in_a_faster_format_is_estimated_faster_and_labelled(gpu):
    m = _mlp()
    shapes = gemm_shapes(m, tensor_infos(m), batch=32, length=128)
    base = build_plan(m, amax={"x": 1.0, "r": 1.0}, excluded={}, op_types=["MatMul"])
    assert base.int8_nodes() == ["ffn1", "ffn2"]
    fp16 = base.with_precision(["ffn1", "ffn2"], "fp16", "test")
    fp32 = base.with_precision(["ffn1", "ffn2"], "fp32", "test")
    fp8 = base.with_precision(["ffn1", "ffn2"], "fp8", "test")
    est = {k: estimate_plan(p, shapes, gpu, shape="b32 l128")
           for k, p in {"fp16": fp16, "fp32": fp32, "fp8": fp8, "int8": base}.items()}
    assert est["fp32"].ms == pytest.approx(2 * est["fp16"].ms)
    assert est["fp8"].by_format.keys() == {"fp8"} and est["int8"].by_format.keys() == {"int8"}
    flops = 2 * 2 * 4096 * 768 * 3072
    if gpu == "L4":  # published peaks: FP16 121 TFLOP/s, FP8 and INT8 2x
        assert est["fp16"].ms == pytest.approx(flops / 121e12 * 1e3)
        assert est["fp8"].ms == pytest.approx(est["fp16"].ms / 2)
        assert est["fp8"].basis == "published peak ratio"
    else:  # Hopper: the H200 measurement of the nearest shape (log distance over M, K, N):
        # FFN1 4096x768x3072 is measured; FFN2 4096x3072x768 is nearest 4096x768x768
        from quantkit.precision.cost_table import MEASURED_H200 as H

        half = flops / 2
        for fmt in ("fp16", "fp8"):
            want = (half / (H[(4096, 768, 3072)][fmt] * 1e12)
                    + half / (H[(4096, 768, 768)][fmt] * 1e12)) * 1e3
            assert est[fmt].ms == pytest.approx(want)
        assert est["fp8"].basis == "measured H200"
        # what the H200 measured at 4,096 tokens: FP8 slower than FP16 at BERT-base's widths
        assert est["fp8"].ms > est["fp16"].ms
    assert all(e.label.startswith("estimated on ") for e in est.values())
