"""FP16-remainder plan rules: normalizations stay FP32 (with the rule's reason, configurable),
and constants FP16 would flush to 0 keep their readers FP32 instead of vanishing silently.
Small graphs built in code, real ORT sessions; bert_int8's prepared MiniLM graph."""

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.precision.fp16_rules import (flushes_in_fp16, fp16_underflow_reasons,
                                           normalization_fp32_reasons)
from quantkit.precision.plan import build_plan
from quantkit.qdq.casts import convert_fp16, emulate_fp16, node_compute_dtypes
from quantkit.graph.facts import constant_arrays
from quantkit.qdq.insert import insert_qdq

F = TensorProto.FLOAT
D = 32


def _model(nodes, inits, out="y", opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["N", D])],
                          [helper.make_tensor_value_info(out, F, ["N", D])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _w(seed):
    return (np.random.default_rng(seed).standard_normal((D, D)) / np.sqrt(D)).astype(np.float32)


def layernorm_model(eps=1e-12):
    """MatMul -> LayerNormalization(eps) -> MatMul."""
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("LayerNormalization", ["h", "g", "b"], ["n"], name="ln",
                              axis=-1, epsilon=eps),
             helper.make_node("MatMul", ["n", "W2"], ["y"], name="mm2")]
    return _model(nodes, {"W1": _w(0), "W2": _w(1), "g": np.ones(D, np.float32),
                          "b": np.zeros(D, np.float32)})


def decomposed_layernorm_model():
    """The LayerNorm older exporters write: ReduceMean, Sub, Pow, ReduceMean, Add eps,
    Sqrt, Div, then * gamma + beta, then a MatMul."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], name="mean", axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"], name="sub"),
             helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
             helper.make_node("ReduceMean", ["d2"], ["var"], name="var", axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["nrm"], name="div"),
             helper.make_node("Mul", ["nrm", "g"], ["sc"], name="gamma"),
             helper.make_node("Add", ["sc", "b"], ["sh"], name="beta"),
             helper.make_node("MatMul", ["sh", "W"], ["y"], name="mm")]
    return _model(nodes, {"two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
                          "g": np.ones(D, np.float32), "b": np.zeros(D, np.float32),
                          "W": _w(2)})


def clamp_model(eps=1e-12):
    """y = x / Clip(ReduceSum(|x|), min=eps): the mean-pooling / L2-normalize clamp."""
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"),
             helper.make_node("ReduceSum", ["a", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Clip", ["s", "eps"], ["c"], name="clamp"),
             helper.make_node("Div", ["x", "c"], ["y"], name="div")]
    return _model(nodes, {"axes": np.array([-1], np.int64), "eps": np.array(eps, np.float32)})


def test_layernorm_is_kept_fp32_by_default_with_its_reason():
    m = layernorm_model()
    plan = build_plan(m, amax={"x": 4.0, "n": 4.0})
    d = plan.decisions["ln"]
    assert d.precision.value == "fp32" and "normalization op LayerNormalization" in d.reason
    assert plan.precision_of("mm1").value == "int8" and plan.precision_of("mm2").value == "int8"
    # configurable: the rule off, LayerNorm goes FP16 like the rest of the remainder
    off = build_plan(layernorm_model(1e-5), amax={"x": 4.0, "n": 4.0}, fp32_ops=())
    assert off.precision_of("ln").value == "fp16"
    # ... but an epsilon FP16 would flush still keeps it FP32, for that reason
    eps = build_plan(m, amax={"x": 4.0, "n": 4.0}, fp32_ops=()).decisions["ln"]
    assert eps.precision.value == "fp32" and "epsilon 1e-12 would flush" in eps.reason
    # FP32 remainder: the rule has nothing to do
    assert build_plan(m, amax={}, remainder="fp32").precision_of("ln").value == "fp32"
    # explicit reasons (e.g. FP16 overflow) win over the rule's
    why = build_plan(m, amax={}, fp32_nodes_reasons={"ln": "overflow"}).decisions["ln"].reason
    assert why == "overflow"


def test_layernorm_kept_fp32_runs_in_fp32_in_the_artifact():
    m = layernorm_model()
    plan = build_plan(m, amax={"x": 4.0, "n": 4.0})
    q, _ = insert_qdq(m, plan)
    f16 = convert_fp16(q, plan)
    ln = next(n for n in f16.graph.node if n.op_type == "LayerNormalization")
    assert node_compute_dtypes(q, plan)["ln"] == "fp32"
    x = np.random.default_rng(3).standard_normal((5, D)).astype(np.float32)
    with OrtRunner(m) as r:
        ref = r.infer({"x": x})["y"]
    for graph in (f16, emulate_fp16(q, plan)):
        with OrtRunner(graph, qdq_mode="exact") as r:
            out = r.infer({"x": x})["y"]
        assert np.abs(out - ref).max() < 0.1 * np.abs(ref).max()
    vi = {v.name: v.type.tensor_type.elem_type for v in f16.graph.value_info}
    assert vi[ln.input[0]] == F and vi[ln.output[0]] == F  # LayerNorm I/O stays float32


def test_decomposed_layernorm_subgraph_is_kept_but_not_its_scale_and_shift():
    m = decomposed_layernorm_model()
    kept = normalization_fp32_reasons(m)
    assert set(kept) == {"mean", "sub", "pow", "var", "add_eps", "sqrt", "div"}
    plan = build_plan(m, amax={"sh": 4.0})
    assert plan.precision_of("gamma").value == "fp16" and plan.precision_of("beta").value == "fp16"
    assert all(plan.precision_of(n).value == "fp32" for n in kept)


def test_a_pow_outside_a_normalization_stays_fp16():
    nodes = [helper.make_node("Pow", ["x", "three"], ["p"], name="cube"),
             helper.make_node("Add", ["x", "p"], ["y"], name="add")]
    m = _model(nodes, {"three": np.array(3.0, np.float32)})
    assert normalization_fp32_reasons(m) == {}


@pytest.mark.parametrize("eps", [1e-9, 1e-12])
def test_a_small_clamp_is_not_flushed_to_zero(eps, caplog):
    m = clamp_model(eps)
    assert fp16_underflow_reasons(m) == {"clamp": pytest.approx(
        fp16_underflow_reasons(m)["clamp"])}
    plan = build_plan(m, amax={})
    assert plan.precision_of("clamp").value == "fp32"
    assert "flush to 0" in plan.decisions["clamp"].reason
    # even a plan that forces it FP16 does not flush it: casts keeps the node FP32, says so
    forced = build_plan(m, amax={}, force={"Clip": "fp16"})
    assert forced.precision_of("clamp").value == "fp16"
    with caplog.at_level(logging.INFO, logger="quantkit.qdq.casts"):
        f16 = convert_fp16(m, forced)
    assert any("clamp" in r.getMessage() and "FP32" in r.getMessage() for r in caplog.records)
    assert constant_arrays(f16.graph)["eps"].dtype == np.float32
    assert float(constant_arrays(f16.graph)["eps"]) == pytest.approx(eps)
    # zero input row: the clamp is what keeps the Div finite (0 / eps = 0, not 0 / 0 = nan)
    x = np.zeros((2, D), np.float32)
    x[1] = 1.0
    with OrtRunner(f16) as r:
        y = r.infer({"x": x})["y"]
    assert np.isfinite(y).all() and np.allclose(y[0], 0.0)


def test_which_constants_count_as_flushed():
    assert flushes_in_fp16(np.array(1e-12, np.float32))
    assert flushes_in_fp16(np.array([1e-9, 2e-9], np.float32))
    assert not flushes_in_fp16(np.array(1e-5, np.float32))  # an FP16 subnormal, not zero
    assert not flushes_in_fp16(np.array(0.0, np.float32))
    # a weight with a few tiny entries next to O(1) ones: negligible within the tensor
    w = np.array([1.0, -0.5, 3e-9], np.float32)
    assert not flushes_in_fp16(w)
    assert not flushes_in_fp16(np.array([1e-12], np.float64))


def test_minilm_keeps_its_13_layernorms_and_its_clamps_fp32(minilm_model):
    from quantkit.graph.facts import ensure_node_names

    m = onnx.load(str(minilm_model))
    ensure_node_names(m)
    lns = [n.name for n in m.graph.node if n.op_type == "LayerNormalization"]
    assert len(lns) == 13
    plan = build_plan(m, amax={})
    assert all(plan.precision_of(n).value == "fp32" for n in lns)
    fp32 = plan.nodes_with("fp32")
    clamps = [n.name for n in m.graph.node if n.op_type == "Clip"]
    assert clamps and all(c in fp32 for c in clamps)  # the 1e-9 / 1e-12 clamps
    dtypes = node_compute_dtypes(m, plan)
    assert all(dtypes[n] == "fp32" for n in lns + clamps)
    assert sum(v == "fp16" for v in dtypes.values()) > 100  # the rest is still FP16
