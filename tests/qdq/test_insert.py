"""insert_qdq on small real graphs: placement, axes, names, onnx.checker, real ORT accuracy."""

import numpy as np
import onnx
import pytest
from onnx import helper

from qdq_graphs import (act_matmul_model, conv_model, conv_transpose_model, gemm_model,
                        initializer, make_model, matmul_model, max_abs_ranges, mlp_model,
                        nodes_by_op, producer_of, qdq_pair_into, random_feed, residual_model,
                        run, shared_input_model, sqnr_db, weight)
from quantkit.backends.ort import OrtRunner
from quantkit.errors import GraphEditError
from quantkit.precision.plan import build_plan
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.placement import residual_add_inputs
from quantkit.qdq.qdq_map import QdqMap
from quantkit.qdq.lint import lint_qdq
from quantkit.qdq.scales import fake_quantize, int8_scale, weight_amax_per_channel


def _calibrated(model, n_feeds=4):
    feeds = [random_feed(model, seed) for seed in range(n_feeds)]
    return feeds, max_abs_ranges(model, feeds)


def _quantize(model):
    feeds, amax = _calibrated(model)
    plan = build_plan(model, amax=amax, calibrator="max")
    qmodel, qmap = insert_qdq(model, plan)
    return feeds, plan, qmodel, qmap


def _axis(node):
    return next((a.i for a in node.attribute if a.name == "axis"), None)


@pytest.mark.parametrize("builder, node, weight_name, axis", [
    (matmul_model, "mm", "W", 1),
    (gemm_model, "fc", "W", 0),
    (conv_model, "conv", "W", 0),
    (conv_transpose_model, "deconv", "W", 1),
])
def test_weight_per_channel_on_output_axis_and_activation_per_tensor(builder, node, weight_name, axis):
    model = builder()
    feeds, plan, q, qmap = _quantize(model)
    onnx.checker.check_model(q, full_check=True)
    assert plan.int8_nodes() == [node]

    wq, wdq = qdq_pair_into(q, node, 1)
    w = initializer(q, weight_name)
    assert w.dtype == np.float32 and wq.input[0] == weight_name  # float weight behind Q (rule 8)
    assert _axis(wq) == axis and _axis(wdq) == axis
    scale = initializer(q, wq.input[1])
    assert scale.shape == (w.shape[axis],)
    np.testing.assert_allclose(scale, int8_scale(weight_amax_per_channel(w, axis)))
    zp = initializer(q, wq.input[2])
    assert zp.dtype == np.int8 and not zp.any()

    aq, adq = qdq_pair_into(q, node, 0)
    assert aq.input[0] == "x" and _axis(aq) is None
    a_scale = initializer(q, aq.input[1])
    assert a_scale.shape == () and a_scale.dtype == np.float32
    np.testing.assert_allclose(a_scale, plan.activation_amax["x"] / 127, rtol=1e-6)

    bias = next(n for n in q.graph.node if n.name == node).input[2:]
    assert all(producer_of(q, b) is None for b in bias)  # biases stay float, unquantized
    assert len(nodes_by_op(q, "QuantizeLinear")) == 2  # nothing on outputs (rule 4)
    assert qmap.original(adq.output[0]) == "x" and qmap.consumer(adq.output[0]) == node
    assert qmap.original(wdq.output[0]) == weight_name
    assert lint_qdq(q) == []

    ref, out = run(model, feeds[0]), run(q, feeds[0], qdq=True)
    for k in ref:
        assert sqnr_db(ref[k], out[k]) > 30, k


def test_qdq_output_equals_numpy_fake_quantization():
    """The Q/DQ graph computes exactly x_q @ W_q + b with TensorRT's rounding (real ORT)."""
    model = matmul_model()
    feeds, plan, q, _ = _quantize(model)
    x = feeds[1]["x"]
    w = initializer(model, "W")
    xq = fake_quantize(x, int8_scale(plan.activation_amax["x"]))
    wq = fake_quantize(w, int8_scale(weight_amax_per_channel(w, 1)), axis=1)
    expected = xq @ wq + initializer(model, "b")
    out = run(q, feeds[1], qdq=True)["y"]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # and the quantization error vs FP32 stays within a few steps per output
    ref = run(model, feeds[1])["y"]
    step = float(int8_scale(plan.activation_amax["x"]))
    assert np.max(np.abs(out - ref)) < 4 * step * np.sqrt(w.shape[0]) * np.abs(w).max()


def test_tensor_feeding_two_matmuls_gets_one_pair_per_consumer():
    model = shared_input_model()
    feeds, plan, q, qmap = _quantize(model)
    x_qs = [n for n in nodes_by_op(q, "QuantizeLinear") if n.input[0] == "x"]
    assert len(x_qs) == 2
    (qa, dqa), (qb, dqb) = qdq_pair_into(q, "mm_a", 0), qdq_pair_into(q, "mm_b", 0)
    assert dqa.output[0] != dqb.output[0] and qa.name != qb.name
    assert sorted(qmap.inserted_for("x")) == sorted([dqa.output[0], dqb.output[0]])
    assert {qmap.consumer(dqa.output[0]), qmap.consumer(dqb.output[0])} == {"mm_a", "mm_b"}
    assert lint_qdq(q) == []
    ref, out = run(model, feeds[0]), run(q, feeds[0], qdq=True)
    assert sqnr_db(ref["y"], out["y"]) > 30


def test_matmul_of_two_activations_quantizes_both_per_tensor():
    model = act_matmul_model()
    feeds, plan, q, _ = _quantize(model)
    for slot, name in ((0, "q"), (1, "k")):
        qn, dq = qdq_pair_into(q, "bmm", slot)
        assert qn.input[0] == name and _axis(qn) is None
        assert initializer(q, qn.input[1]).shape == ()
    ref, out = run(model, feeds[0]), run(q, feeds[0], qdq=True)
    assert sqnr_db(ref["y"], out["y"]) > 30


def test_tensor_read_twice_by_one_node_gets_one_pair():
    f = onnx.TensorProto.FLOAT
    model = make_model([helper.make_node("MatMul", ["x", "x"], ["y"], name="square")],
                       [helper.make_tensor_value_info("x", f, ["N", 16, 16])],
                       [helper.make_tensor_value_info("y", f, ["N", 16, 16])])
    feeds, plan, q, _ = _quantize(model)
    node = next(n for n in q.graph.node if n.name == "square")
    assert node.input[0] == node.input[1] == "x__dq_square"
    assert len(nodes_by_op(q, "QuantizeLinear")) == 1 and lint_qdq(q) == []
    assert sqnr_db(run(model, feeds[0])["y"], run(q, feeds[0], qdq=True)["y"]) > 30


def test_residual_add_skip_input_is_quantized_when_its_amax_is_known():
    model = residual_model()
    feeds, amax = _calibrated(model)
    plan = build_plan(model, amax=amax)
    assert plan.int8_nodes() == ["conv1", "conv2"]
    assert residual_add_inputs(model, plan) == ["r"]
    q, qmap = insert_qdq(model, plan)
    add = next(n for n in q.graph.node if n.name == "res_add")
    assert producer_of(q, add.input[0]).name == "conv2"  # the Conv side stays direct
    sq, sdq = qdq_pair_into(q, "res_add", 1)
    assert sq.input[0] == "r" and qmap.consumer(sdq.output[0]) == "res_add"
    # r also feeds conv2: separate pair (rule 7), and lint stays clean
    _, cdq = qdq_pair_into(q, "conv2", 0)
    assert cdq.output[0] != sdq.output[0]
    assert lint_qdq(q) == []
    ref, out = run(model, feeds[0]), run(q, feeds[0], qdq=True)
    assert sqnr_db(ref["y"], out["y"]) > 25


def _conv_plus_skip_model():
    """x -> Conv -> c;  x -> Relu -> r;  Add(c, r): the skip r feeds no INT8 node."""
    rng = np.random.default_rng(5)
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["c", "r"], ["y"], name="add")]
    return make_model(nodes, [helper.make_tensor_value_info("x", f, ["N", 16, 6, 6])],
                      [helper.make_tensor_value_info("y", f, ["N", 16, 6, 6])],
                      [onnx.numpy_helper.from_array(weight(rng, 16, 16, 3, 3), "W")])


def test_residual_add_skip_is_left_float_without_its_amax_and_quantized_with_it():
    model = _conv_plus_skip_model()
    feeds, amax = _calibrated(model)
    without = build_plan(model, amax={"x": amax["x"]})
    assert residual_add_inputs(model, without) == ["r"]  # the caller should calibrate r
    q, _ = insert_qdq(model, without)
    assert next(n for n in q.graph.node if n.name == "add").input[1] == "r"

    with_r = build_plan(model, amax={"x": amax["x"], "r": amax["r"]})
    q, _ = insert_qdq(model, with_r)
    sq, _ = qdq_pair_into(q, "add", 1)
    assert sq.input[0] == "r"
    assert lint_qdq(q) == []
    ref, out = run(model, feeds[0]), run(q, feeds[0], qdq=True)
    assert sqnr_db(ref["y"], out["y"]) > 30


def test_add_is_not_residual_when_the_conv_output_has_other_readers():
    model = _conv_plus_skip_model()
    model.graph.output.append(helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, None))
    plan = build_plan(model, amax={"x": 1.0, "r": 1.0})
    assert residual_add_inputs(model, plan) == []


def test_broadcast_add_after_conv_is_not_residual():
    f = onnx.TensorProto.FLOAT
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[1], keepdims=1),
             helper.make_node("Add", ["c", "m"], ["y"], name="add")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", f, ["N", 16, 6, 6])],
                       [helper.make_tensor_value_info("y", f, ["N", 16, 6, 6])],
                       [onnx.numpy_helper.from_array(weight(rng, 16, 16, 3, 3), "W")])
    plan = build_plan(model, amax={"x": 1.0, "m": 1.0})
    assert plan.int8_nodes() == ["conv"] and residual_add_inputs(model, plan) == []


def test_no_qdq_on_graph_outputs_and_outputs_keep_their_names():
    model = mlp_model()
    _, plan, q, _ = _quantize(model)
    assert [o.name for o in q.graph.output] == ["logits", "probs"]
    for o in q.graph.output:
        p = producer_of(q, o.name)
        assert p.op_type not in ("QuantizeLinear", "DequantizeLinear")


def test_unnamed_nodes_are_named_deterministically_and_plan_addresses_them():
    model = mlp_model()
    assert all(not n.name for n in model.graph.node)
    feeds, plan, q, _ = _quantize(model)
    assert plan.int8_nodes() == ["MatMul_0", "MatMul_3"]
    q2, _ = insert_qdq(mlp_model(), plan)  # a fresh unnamed copy gets the same names
    assert [n.name for n in q.graph.node] == [n.name for n in q2.graph.node]
    assert len({n.name for n in q.graph.node}) == len(q.graph.node)


def test_weight_from_constant_node_and_batched_weight_use_last_axis():
    rng = np.random.default_rng(3)
    w = weight(rng, 2, 32, 24)
    nodes = [helper.make_node("Constant", [], ["W"], name="w_const",
                              value=onnx.numpy_helper.from_array(w)),
             helper.make_node("MatMul", ["x", "W"], ["y"], name="bmm_w")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 16, 32])],
                       [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16, 24])])
    feeds, plan, q, _ = _quantize(model)
    wq, wdq = qdq_pair_into(q, "bmm_w", 1)
    assert _axis(wq) == 2 and initializer(q, wq.input[1]).shape == (24,)
    assert lint_qdq(q) == []
    # ORT 1.32 CPU fuses DQ(per-channel 3-D weight) -> MatMul into MatMulIntegerToFloat and
    # that kernel then rejects the per-column zero point; the basic level runs the Q/DQ as is.
    with OrtRunner(q, graph_optimization_level="basic") as r:
        out = r.infer(feeds[0])
    ref = run(model, feeds[0])
    assert sqnr_db(ref["y"], out["y"]) > 30


def test_opset_below_13_is_refused_with_the_fix():
    model = matmul_model()
    model.opset_import[0].version = 12
    plan = build_plan(matmul_model(), amax={"x": 1.0})
    with pytest.raises(GraphEditError, match="opset 12") as err:
        insert_qdq(model, plan)
    assert err.value.fix and "opset" in err.value.fix


def test_int8_node_without_amax_is_an_error_naming_the_tensor():
    model = matmul_model()
    plan = build_plan(model, amax={"x": 1.0})
    broken = type(plan)(plan.decisions, {}, plan.calibrator)
    with pytest.raises(GraphEditError, match="x"):
        insert_qdq(model, broken)


def test_qdqmap_round_trips_and_maps_unknown_names_to_themselves():
    _, _, _, qmap = _quantize(shared_input_model())
    again = QdqMap.from_dict(qmap.to_dict())
    assert again == qmap and len(again) == len(qmap) == 16
    assert again.original("y") == "y" and again.consumer("y") is None
    roles = {e.role for e in qmap.tensors.values()}
    assert roles == {"quantized", "dequantized", "scale", "zero_point"}


def test_input_model_is_not_modified():
    model = conv_model()
    before = model.SerializeToString()
    _quantize(model)
    assert model.SerializeToString() == before
