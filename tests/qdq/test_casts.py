"""convert_fp16 / emulate_fp16 / fp16_overflow_nodes on small real graphs, run in real ORT."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qdq_graphs import (init, initializer, make_model, max_abs_ranges, mlp_model, nodes_by_op,
                        producer_of, random_feed, residual_model, run, sqnr_db, weight)
from quantkit.errors import GraphEditError
from quantkit.precision.plan import Precision, build_plan
from quantkit.qdq.casts import (FP16_MAX, convert_fp16, emulate_fp16, fp16_overflow_nodes,
                                node_compute_dtypes)
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import lint_qdq

F, H = TensorProto.FLOAT, TensorProto.FLOAT16


def _elem_types(model):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    out = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    out.update({t.name: t.data_type for t in g.initializer})
    return out


def _fp16_plan(model):
    return build_plan(model, amax={})  # nothing calibrated: everything is the fp16 remainder


def _r16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


def test_mlp_converts_to_fp16_with_float32_io_and_stays_close_to_fp32():
    model = mlp_model()
    plan = _fp16_plan(model)
    assert plan.counts() == {"int8": 0, "fp16": 6, "fp32": 0}
    fp16 = convert_fp16(model, plan)
    onnx.checker.check_model(fp16, full_check=True)
    types = _elem_types(fp16)
    assert all(types[w] == H for w in ("W1", "b1", "W2", "b2"))
    assert all(types[t] == H for t in ("h1", "h2", "h3", "h4"))
    assert types["x"] == F and types["logits"] == F and types["probs"] == F
    assert [n.op_type for n in nodes_by_op(fp16, "Cast")] == ["Cast"] * 3  # x in, 2 outputs
    value_info = {vi.name: vi.type.tensor_type.elem_type for vi in fp16.graph.value_info}
    assert value_info["h1"] == H and value_info["x__to_fp16"] == H  # typed for ORT's optimizers
    feed = random_feed(model, 0)
    ref, out = run(model, feed), run(fp16, feed)
    for k in ref:
        assert out[k].dtype == np.float32
        assert sqnr_db(ref[k], out[k]) > 50, k


def test_convert_and_emulate_agree_on_an_mlp():
    model = mlp_model()
    plan = _fp16_plan(model)
    feed = random_feed(model, 1, batch=32)
    ref = run(model, feed)
    conv, emu = run(convert_fp16(model, plan), feed), run(emulate_fp16(model, plan), feed)
    for k in ref:
        assert sqnr_db(emu[k], conv[k]) > 50, k
        # both are within FP16 error of FP32: a few float16 ulps of the output scale
        tol = 8 * np.finfo(np.float16).eps * np.max(np.abs(ref[k]))
        assert np.max(np.abs(conv[k] - ref[k])) < tol and np.max(np.abs(emu[k] - ref[k])) < tol


def test_emulation_rounds_every_fp16_tensor_like_numpy():
    model = mlp_model()
    emu_model = emulate_fp16(model, _fp16_plan(model))
    onnx.checker.check_model(emu_model, full_check=True)
    assert all(t.data_type == F for t in emu_model.graph.initializer)
    feed = random_feed(model, 2)
    w = {n: initializer(model, n) for n in ("W1", "b1", "W2", "b2")}
    x = _r16(feed["x"])
    h3 = _r16(np.maximum(_r16(_r16(x @ _r16(w["W1"])) + _r16(w["b1"])), 0))
    logits = _r16(_r16(h3 @ _r16(w["W2"])) + _r16(w["b2"]))
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = _r16(e / e.sum(axis=-1, keepdims=True))
    out = run(emu_model, feed)
    ulp = np.finfo(np.float16).eps
    np.testing.assert_allclose(out["logits"], logits, rtol=2 * ulp, atol=2 * ulp * np.abs(logits).max())
    np.testing.assert_allclose(out["probs"], probs, rtol=2 * ulp, atol=1e-4)
    # every output is exactly representable in float16
    for v in out.values():
        np.testing.assert_array_equal(v, _r16(v))


def test_keep_io_types_false_makes_graph_io_float16():
    model = mlp_model()
    fp16 = convert_fp16(model, _fp16_plan(model), keep_io_types=False)
    onnx.checker.check_model(fp16, full_check=True)
    assert fp16.graph.input[0].type.tensor_type.elem_type == H
    assert all(o.type.tensor_type.elem_type == H for o in fp16.graph.output)
    assert not nodes_by_op(fp16, "Cast")
    feed = random_feed(model, 3)
    out = run(fp16, {"x": feed["x"].astype(np.float16)})
    assert out["logits"].dtype == np.float16
    assert sqnr_db(run(model, feed)["logits"], out["logits"]) > 45


def test_fp32_planned_node_stays_fp32_with_casts_around_it():
    model = mlp_model()
    plan = _fp16_plan(model).with_precision("Softmax_5", "fp32", "sensitive")
    fp16 = convert_fp16(model, plan)
    onnx.checker.check_model(fp16, full_check=True)
    sm = next(n for n in fp16.graph.node if n.name == "Softmax_5")
    cast = producer_of(fp16, sm.input[0])
    assert cast.op_type == "Cast" and cast.attribute[0].i == F
    assert sm.output[0] == "probs"  # already float32: no output cast needed
    assert node_compute_dtypes(model, plan)["Softmax_5"] == "fp32"
    feed = random_feed(model, 4)
    assert sqnr_db(run(model, feed)["probs"], run(fp16, feed)["probs"]) > 50


def test_initializer_shared_by_fp16_and_fp32_nodes_gets_an_fp16_copy():
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"], name="mm16"),
             helper.make_node("MatMul", ["x", "W"], ["b"], name="mm32"),
             helper.make_node("Sub", ["a", "b"], ["y"], name="sub")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", 16])],
                       [helper.make_tensor_value_info("y", F, ["N", 16])], [init("W", weight(rng, 16, 16))])
    plan = _fp16_plan(model).with_precision("mm32", "fp32", "kept")
    fp16 = convert_fp16(model, plan)
    onnx.checker.check_model(fp16, full_check=True)
    inits = {t.name: t.data_type for t in fp16.graph.initializer}
    assert inits == {"W": F, "W__fp16": H}
    mm16 = next(n for n in fp16.graph.node if n.name == "mm16")
    mm32 = next(n for n in fp16.graph.node if n.name == "mm32")
    assert mm16.input[1] == "W__fp16" and mm32.input[1] == "W"
    feed = random_feed(model, 0)
    y = run(fp16, feed)["y"]
    assert np.max(np.abs(y)) < 0.05  # fp16 vs fp32 of the same product: only rounding


def _dtype_ops_model():
    """Shape / ConstantOfShape / Cast / Range / Less / Where / Constant: dtype-carrying ops."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["half"], name="cos",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Add", ["x", "half"], ["y1"], name="add_half"),
        helper.make_node("Gather", ["s", "zero_i"], ["n"], name="gather", axis=0),
        helper.make_node("Cast", ["n"], ["nf"], name="cast_n", to=F),
        helper.make_node("Mul", ["y1", "nf"], ["y2"], name="mul_n"),
        helper.make_node("Range", ["r0", "r1", "r2"], ["ramp"], name="range"),
        helper.make_node("Add", ["y2", "ramp"], ["y3"], name="add_ramp"),
        helper.make_node("Less", ["x", "zero_f"], ["neg"], name="less"),
        helper.make_node("Where", ["neg", "y3", "x"], ["y4"], name="where"),
        helper.make_node("Constant", [], ["two"], name="two_c",
                         value=numpy_helper.from_array(np.array(2.0, np.float32))),
        helper.make_node("Mul", ["y4", "two"], ["y"], name="mul_two"),
        helper.make_node("Cast", ["y"], ["yi"], name="to_int", to=TensorProto.INT32),
    ]
    inits = [init("zero_i", np.array(0, np.int64)), init("zero_f", np.array(0.0, np.float32)),
             init("r0", np.array(0.0, np.float32)), init("r1", np.array(8.0, np.float32)),
             init("r2", np.array(1.0, np.float32))]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", 8])],
                      [helper.make_tensor_value_info("y", F, ["N", 8]),
                       helper.make_tensor_value_info("yi", TensorProto.INT32, ["N", 8]),
                       helper.make_tensor_value_info("s", TensorProto.INT64, [2])], inits)


def test_dtype_carrying_attributes_follow_and_integer_tensors_are_untouched():
    model = _dtype_ops_model()
    fp16 = convert_fp16(model, _fp16_plan(model))
    onnx.checker.check_model(fp16, full_check=True)
    types = _elem_types(fp16)
    by_name = {n.name: n for n in fp16.graph.node}
    cos_value = next(a.t for a in by_name["cos"].attribute if a.name == "value")
    assert cos_value.data_type == H
    assert next(a.i for a in by_name["cast_n"].attribute if a.name == "to") == H
    assert types["s"] == TensorProto.INT64 and types["n"] == TensorProto.INT64
    assert types["ramp"] == F  # Range has no float16 kernel type: stays float32 ...
    assert producer_of(fp16, by_name["add_ramp"].input[1]).op_type == "Cast"  # ... cast for Add
    assert types["two"] == H and types["y3"] == H and types["y4"] == H
    assert by_name["less"].input[0] == "x"  # bool result: compares the float32 input, no cast
    assert types["yi"] == TensorProto.INT32
    feed = random_feed(model, 0)
    ref, out = run(model, feed), run(fp16, feed)
    assert sqnr_db(ref["y"], out["y"]) > 50
    np.testing.assert_array_equal(ref["s"], out["s"])
    assert np.max(np.abs(ref["yi"] - out["yi"])) <= 1


def test_emulate_handles_dtype_ops_and_matches_convert():
    model = _dtype_ops_model()
    plan = _fp16_plan(model)
    feed = random_feed(model, 1)
    emu, conv = run(emulate_fp16(model, plan), feed), run(convert_fp16(model, plan), feed)
    assert sqnr_db(emu["y"], conv["y"]) > 50


def test_int8_and_fp16_together_keep_qdq_float32_at_the_boundary():
    model = residual_model()
    feeds = [random_feed(model, s) for s in range(4)]
    plan = build_plan(model, amax=max_abs_ranges(model, feeds))
    q, _ = insert_qdq(model, plan)
    mixed = convert_fp16(q, plan)
    onnx.checker.check_model(mixed, full_check=True)
    types = _elem_types(mixed)
    for node in nodes_by_op(mixed, "QuantizeLinear"):
        assert types[node.input[0]] == F and types[node.input[1]] == F
    for node in nodes_by_op(mixed, "DequantizeLinear"):
        assert types[node.output[0]] == F
    # relu1 (fp16) feeds two Qs through one shared Cast(to float)
    r_cast = {producer_of(mixed, n.input[0]).name for n in nodes_by_op(mixed, "QuantizeLinear")
              if n.input[0].startswith("r__")}
    assert len(r_cast) == 1
    assert types["c1"] == F and types["r"] == H  # INT8 conv writes float32, Relu is fp16
    dtypes = node_compute_dtypes(q, plan)
    assert dtypes["conv1"] == dtypes["conv2"] == "fp32" and dtypes["relu1"] == "fp16"
    assert dtypes["res_add"] == "fp32"  # reads a DQ: nothing between DQ and consumer
    assert lint_qdq(mixed) == []
    ref = run(model, feeds[0])
    q_out, mixed_out = run(q, feeds[0], qdq=True), run(mixed, feeds[0], qdq=True)
    assert sqnr_db(q_out["y"], mixed_out["y"]) > 45
    emulated = run(emulate_fp16(q, plan), feeds[0], qdq=True)
    assert sqnr_db(emulated["y"], mixed_out["y"]) > 45
    assert sqnr_db(ref["y"], mixed_out["y"]) > 25


def _overflow_model():
    """x * 1000 * 1000 / 1e6 + x: the middle tensor reaches ~1e6 > 65504."""
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"], name="mul1"),
             helper.make_node("Mul", ["a", "k"], ["big"], name="mul2"),
             helper.make_node("Div", ["big", "m"], ["c"], name="div"),
             helper.make_node("Add", ["c", "x"], ["y"], name="add")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", 8])],
                      [helper.make_tensor_value_info("y", F, ["N", 8])],
                      [init("k", np.array(1000.0, np.float32)), init("m", np.array(1e6, np.float32))])


def test_fp16_overflow_nodes_are_kept_fp32_and_fix_the_overflow():
    model = _overflow_model()
    feeds = [random_feed(model, s) for s in range(2)]
    absmax = max_abs_ranges(model, feeds)
    assert absmax["big"] > FP16_MAX
    overflow = fp16_overflow_nodes(model, absmax)
    assert set(overflow) == {"mul2", "div"}
    assert "big" in overflow["mul2"] and "65504" in overflow["mul2"]
    assert "m" in overflow["div"] or "big" in overflow["div"]

    naive = emulate_fp16(model, _fp16_plan(model))
    assert not np.all(np.isfinite(run(naive, feeds[0])["y"]))  # FP16 overflows to inf
    plan = build_plan(model, amax={}, fp32_nodes_reasons=overflow)
    assert plan.decisions["mul2"].precision is Precision.FP32
    assert plan.decisions["mul2"].reason == overflow["mul2"]
    ref = run(model, feeds[0])
    for fixed in (emulate_fp16(model, plan), convert_fp16(model, plan)):
        out = run(fixed, feeds[0])
        assert np.all(np.isfinite(out["y"])) and sqnr_db(ref["y"], out["y"]) > 45


def test_fp16_overflow_limit_is_configurable_and_nonfinite_is_not_overflow():
    model = _overflow_model()
    # the constant m = 1e6 exceeds the limit too: div reads it
    assert set(fp16_overflow_nodes(model, {"a": 5000.0}, limit=1000.0)) == {"mul1", "mul2", "div"}
    assert "mul1" not in fp16_overflow_nodes(model, {"a": float("inf")})


def test_subgraph_reading_an_fp16_tensor_gets_a_float32_cast():
    then_g = helper.make_graph([helper.make_node("Identity", ["h"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", F, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", F, None)])
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
             helper.make_node("Add", ["z", "h"], ["y"], name="add")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [4]),
                               helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                       [helper.make_tensor_value_info("y", F, [4])])
    fp16 = convert_fp16(model, _fp16_plan(model))
    onnx.checker.check_model(fp16)
    branch = next(n for n in fp16.graph.node if n.name == "branch")
    then_body = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert then_body.node[0].input[0] == "h__to_fp32"
    x = np.array([-1.0, 0.5, 2.0, 3.25], np.float32)
    for c in (True, False):
        feed = {"x": x, "cond": np.array(c)}
        np.testing.assert_allclose(run(fp16, feed)["y"], run(model, feed)["y"], rtol=1e-3)


def test_node_missing_from_plan_is_an_error():
    model = mlp_model()
    plan = _fp16_plan(model)
    other = mlp_model()
    other.graph.node[2].name = "renamed"
    with pytest.raises(GraphEditError, match="renamed"):
        convert_fp16(other, plan)


def test_conversion_does_not_modify_its_input():
    model = mlp_model()
    plan = _fp16_plan(model)
    before = model.SerializeToString()
    convert_fp16(model, plan)
    emulate_fp16(model, plan)
    assert model.SerializeToString() == before
