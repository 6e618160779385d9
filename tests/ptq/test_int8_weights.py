"""INT8 weights stored as int8 initializers behind DequantizeLinear (TRT rule 8)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ptq_graphs import F, calibrated_plan, init, make_model, run
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import lint_for_target


def mixed(rng):
    """Conv (per-channel axis 0) -> flatten -> Gemm transB=1 (axis 0) -> MatMul [K, N] (axis 1)."""
    wc = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    wg = rng.standard_normal((32, 16 * 6 * 6)).astype(np.float32) * 0.05
    wm = rng.standard_normal((32, 24)).astype(np.float32) * 0.2
    wm[0, :] = 7.0
    return make_model(
        [helper.make_node("Conv", ["x", "wc", "bc"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Flatten", ["r"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], name="gemm", transB=1),
         helper.make_node("MatMul", ["g", "wm"], ["y"], name="mm")],
        [helper.make_tensor_value_info("x", F, ["B", 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, ["B", 24])],
        [init("wc", wc), init("bc", np.zeros(16, np.float32)), init("wg", wg),
         init("bg", np.zeros(32, np.float32)), init("wm", wm)])


def test_int8_weights_are_bit_identical_to_q_dq_and_lint_clean():
    rng = np.random.default_rng(0)
    model = mixed(rng)
    feeds = [{"x": rng.standard_normal((4, 3, 8, 8)).astype(np.float32)} for _ in range(2)]
    plan, _ = calibrated_plan(model, feeds)
    float_w, _ = insert_qdq(model, plan, target="tensorrt")
    int8_w, qmap = insert_qdq(model, plan, target="tensorrt", int8_weights=True)
    for level in ("disable", "basic"):
        assert np.array_equal(run(int8_w, feeds, level=level), run(float_w, feeds, level=level))
    assert lint_for_target(int8_w, "tensorrt") == []
    # every weight is an int8 initializer read by one DequantizeLinear; no Q on weights
    inits = {t.name: numpy_helper.to_array(t) for t in int8_w.graph.initializer}
    q_inputs = {n.input[0] for n in int8_w.graph.node if n.op_type == "QuantizeLinear"}
    assert not q_inputs & {"wc", "wg", "wm"}
    weight_dq = [n for n in int8_w.graph.node if n.op_type == "DequantizeLinear"
                 and n.input[0] in inits]
    assert len(weight_dq) == 3 and all(inits[n.input[0]].dtype == np.int8 for n in weight_dq)
    assert {qmap.original(n.input[0]) for n in weight_dq} == {"wc", "wg", "wm"}
    assert len(int8_w.SerializeToString()) < 0.5 * len(float_w.SerializeToString())


def test_int8_weights_round_half_to_even_like_quantize_linear():
    """Weights exactly on .5 of the grid: QuantizeLinear rounds half to even; so must we."""
    w = np.array([[2.5, -2.5, 3.5, 127.0], [0.5, -0.5, 1.5, -127.0]], np.float32).T  # [4, 2]
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [helper.make_tensor_value_info("x", F, ["B", 4])],
                       [helper.make_tensor_value_info("y", F, ["B", 2])], [init("w", w)])
    feeds = [{"x": np.eye(4, dtype=np.float32)}]
    plan, _ = calibrated_plan(model, feeds)
    a, _ = insert_qdq(model, plan, int8_weights=True)
    b, _ = insert_qdq(model, plan)
    assert np.array_equal(run(a, feeds), run(b, feeds))
    onnx.checker.check_model(a, full_check=True)
