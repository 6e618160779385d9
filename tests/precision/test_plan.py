"""build_plan and Plan on small real graphs (onnx.helper), no calibration engine needed."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ConfigError
from quantkit.precision.plan import (NodeDecision, Plan, Precision, build_plan,
                                     ensure_node_names)

F = TensorProto.FLOAT


def _w(*shape, seed=0):
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), f"W{seed}")


def _model(nodes, inputs, outputs, inits=()):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _block():
    """x -> mm_in (MatMul) -> add -> softmax ; scores with a -inf mask -> mm_att (MatMul)."""
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"], name="mm_in"),
             helper.make_node("Add", ["h", "mask"], ["scores"], name="add_mask"),
             helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="mm_att")]
    return _model(nodes, [_vi("x", ["N", 32, 32]), _vi("mask", ["N", 32, 32]), _vi("v", ["N", 32, 32])],
                  [_vi("y", ["N", 32, 32])], [_w(32, 32, seed=0)])


AMAX = {"x": 3.0, "h": 5.0, "scores": float("inf"), "p": 1.0, "v": 2.0, "mask": float("inf")}


def test_weighted_ops_with_calibrated_inputs_are_int8_with_reasons():
    plan = build_plan(_block(), amax=AMAX, calibrator="entropy")
    d = plan.decisions
    assert d["mm_in"] == NodeDecision(Precision.INT8, "in scope (MatMul), calibrator entropy")
    assert d["mm_att"].precision is Precision.INT8
    assert d["add_mask"] == NodeDecision(Precision.FP16, "not a weighted op (Add)")
    assert d["softmax"].reason == "not a weighted op (Softmax)"
    assert plan.counts() == {"int8": 2, "fp16": 2, "fp32": 0}
    assert plan.int8_nodes() == ["mm_in", "mm_att"] and plan.calibrator == "entropy"
    assert "scores" not in plan.activation_amax and plan.activation_amax["x"] == 3.0


def test_excluded_input_keeps_node_out_of_int8_with_its_reason():
    plan = build_plan(_block(), amax=AMAX, excluded={"p": "non-finite values (-inf)"})
    d = plan.decisions["mm_att"]
    assert d.precision is Precision.FP16
    assert "input p" in d.reason and "non-finite" in d.reason
    assert "p" not in plan.activation_amax


def test_missing_or_nonfinite_amax_is_a_reason_not_a_crash():
    amax = dict(AMAX, p=float("nan"))
    del amax["v"]
    plan = build_plan(_block(), amax=amax)
    assert plan.decisions["mm_att"].reason == "input p has non-finite amax nan"
    plan = build_plan(_block(), amax={k: v for k, v in AMAX.items() if k not in ("v",)})
    assert plan.decisions["mm_att"].reason == "input v has no calibrated range"


def _matmul(x_shape, w_shape, name="mm"):
    return _model([helper.make_node("MatMul", ["x", "W0"], ["y"], name=name)],
                  [_vi("x", x_shape)], [_vi("y", [f"y{i}" for i in range(len(x_shape))])],
                  [_w(*w_shape)])


@pytest.mark.parametrize("x_shape, w_shape, small", [
    ([1, 64], [64, 64], "GEMV-like MatMul (M=1, N=64)"),
    ([8, 64], [64, 1], "GEMV-like MatMul (M=8, N=1)"),
    ([1, 1, 64], [64, 32], "GEMV-like MatMul (M=1, N=32)"),
    ([8, 8], [8, 64], "small MatMul (K=8, N=64 < 16)"),
    (["N", 64], [64, 64], None),  # batch unknown: not GEMV
    ([2, 7, 64], [64, 32], None),
])
def test_gemv_and_small_matmuls_are_skipped(x_shape, w_shape, small):
    model = _matmul(x_shape, w_shape)
    d = build_plan(model, amax={"x": 1.0}).decisions["mm"]
    if small is None:
        assert d.precision is Precision.INT8
    else:
        assert d.precision is Precision.FP16 and d.reason.startswith(small) and "rule 10" in d.reason
        assert build_plan(model, amax={"x": 1.0}, skip_small=False).decisions["mm"].precision is Precision.INT8


def _conv(c_in, c_out, group=1, k=3, from_input=True):
    nodes = [helper.make_node("Conv", ["x" if from_input else "r", "W0"], ["y"], name="conv",
                              group=group, pads=[1, 1, 1, 1])]
    if not from_input:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["r"], name="relu"))
    return _model(nodes, [_vi("x", ["N", c_in, 8, 8])], [_vi("y", ["N", c_out, 8, 8])],
                  [_w(c_out, c_in // group, k, k)])


@pytest.mark.parametrize("c_in, c_out, group, from_input, int8", [
    (3, 32, 1, True, True),     # first layer, 32 out channels: ModelOpt keeps it INT8
    (3, 4, 1, True, False),     # few channels both ways
    (4, 4, 1, False, False),
    (8, 8, 1, False, False),    # multiples of 8 but both < 16 and not reading a graph input
    (8, 8, 1, True, True),      # ... reading the graph input
    (32, 32, 32, False, True),  # depthwise 3x3 with 32 channels
    (32, 12, 4, False, False),  # grouped, 12 out channels not a multiple of 8
    (16, 16, 1, False, True),
])
def test_convs_with_few_channels_are_skipped(c_in, c_out, group, from_input, int8):
    plan = build_plan(_conv(c_in, c_out, group, from_input=from_input), amax={"x": 1.0, "r": 1.0})
    d = plan.decisions["conv"]
    assert (d.precision is Precision.INT8) == int8, d.reason
    if not int8:
        assert "few channels" in d.reason


def test_force_by_node_name_or_op_type_regex():
    plan = build_plan(_block(), amax=AMAX, force={"mm_a.*": "fp32", "Softmax": Precision.FP32})
    assert plan.decisions["mm_att"] == NodeDecision(Precision.FP32, "forced by config ('mm_a.*')")
    assert plan.decisions["softmax"].precision is Precision.FP32
    assert plan.decisions["mm_in"].precision is Precision.INT8  # fullmatch: 'mm_a.*' != mm_in


def test_force_int8_on_a_tensor_with_nonfinite_amax_is_refused():
    with pytest.raises(ConfigError, match="softmax") as err:
        build_plan(_block(), amax=AMAX, force={"softmax": "int8"})
    assert "scores" in str(err.value)


def test_force_int8_on_a_calibrated_non_weighted_op_is_allowed():
    plan = build_plan(_block(), amax=dict(AMAX, scores=4.0), force={"softmax": "int8"})
    assert plan.decisions["softmax"].precision is Precision.INT8


@pytest.mark.parametrize("bad", [{"mm_(": "fp32"}, {"mm_in": "int4"}])
def test_bad_force_config_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        build_plan(_block(), amax=AMAX, force=bad)


def test_include_and_exclude_nodes():
    plan = build_plan(_block(), amax=AMAX, exclude_nodes=["mm_in"])
    assert plan.decisions["mm_in"].reason == "excluded by config (exclude_nodes)"
    plan = build_plan(_block(), amax=AMAX, include_nodes=["mm_in"])
    assert plan.int8_nodes() == ["mm_in"]
    assert plan.decisions["mm_att"].reason == "not in include_nodes"


def test_unknown_node_names_in_config_suggest_close_ones():
    with pytest.raises(ConfigError, match="mm_inn") as err:
        build_plan(_block(), amax=AMAX, exclude_nodes=["mm_inn"])
    assert "mm_in" in err.value.fix


def test_fp32_reasons_override_the_remainder_but_not_int8():
    reasons = {"add_mask": "output scores reaches |x|=3.4e+38 > FP16 max 65504",
               "mm_in": "input reaches 1e5"}
    plan = build_plan(_block(), amax=AMAX, fp32_nodes_reasons=reasons)
    assert plan.decisions["add_mask"] == NodeDecision(Precision.FP32, reasons["add_mask"])
    assert plan.decisions["mm_in"].precision is Precision.INT8


def test_remainder_fp32_and_int8_remainder_refused():
    plan = build_plan(_block(), amax={}, remainder="fp32")
    assert plan.counts() == {"int8": 0, "fp16": 0, "fp32": 4}
    with pytest.raises(ConfigError, match="remainder"):
        build_plan(_block(), amax={}, remainder="int8")


def test_op_types_widen_the_scope():
    plan = build_plan(_block(), amax=dict(AMAX, mask=1.0), op_types=("MatMul", "Add"))
    assert plan.decisions["add_mask"].precision is Precision.INT8


def test_ensure_node_names_is_deterministic_unique_and_idempotent():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="dup"),
             helper.make_node("Relu", ["b"], ["c"], name="dup"), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Relu", ["d"], ["y"], name="Relu_0")]
    model = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    ensure_node_names(model)
    names = [n.name for n in model.graph.node]
    assert names == ["Relu_0_1", "dup", "Relu_2", "Relu_3", "Relu_0"]
    assert [n.name for n in ensure_node_names(copy).graph.node] == names
    before = model.SerializeToString()
    assert ensure_node_names(model).SerializeToString() == before


def test_build_plan_names_unnamed_nodes_in_place():
    model = _matmul(["N", 64], [64, 64], name="")
    plan = build_plan(model, amax={"x": 1.0})
    assert list(plan.decisions) == ["MatMul_0"] and model.graph.node[0].name == "MatMul_0"


def test_plan_round_trips_through_json():
    plan = build_plan(_block(), amax=AMAX, calibrator="percentile")
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan
    assert again.to_dict()["decisions"]["mm_in"] == {"precision": "int8",
                                                      "reason": "in scope (MatMul), calibrator percentile"}


@pytest.mark.parametrize("bad", [[], {"decisions": 3}, {"decisions": {"a": {"reason": "x"}}},
                                 {"decisions": {"a": {"precision": "int3", "reason": ""}}}])
def test_plan_from_bad_dict_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        Plan.from_dict(bad)


def test_with_precision_returns_a_new_plan():
    plan = build_plan(_block(), amax=AMAX)
    changed = plan.with_precision(["mm_in"], "fp16", "sensitive (per-layer SQNR 18 dB)")
    assert plan.decisions["mm_in"].precision is Precision.INT8
    assert changed.decisions["mm_in"] == NodeDecision(Precision.FP16, "sensitive (per-layer SQNR 18 dB)")
    assert changed.int8_nodes() == ["mm_att"] and changed.activation_amax == plan.activation_amax
    assert plan.with_precision("softmax", Precision.FP32, "r").decisions["softmax"].precision is Precision.FP32
    with pytest.raises(ConfigError, match="mm_x"):
        plan.with_precision(["mm_x"], "fp16", "r")
    with pytest.raises(ConfigError):
        plan.with_precision(["mm_in"], "bf16", "r")


def test_precision_is_a_str_enum():
    assert Precision("fp16") is Precision.FP16 and Precision.INT8 == "int8" and str(Precision.FP32) == "fp32"
