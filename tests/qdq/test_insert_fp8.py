"""FP8 E4M3 through the one Q/DQ writer: lint-clean artifacts that run on ONNX Runtime CPU and
match the numpy reference; the FP8 lint rules fire on what they forbid."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import GraphEditError
from quantkit.precision.plan import Precision, build_plan
from quantkit.qdq.fp8 import FP8_DTYPE, fake_quantize_fp8, fp8_scale
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import FP8_RULES, lint_qdq
from qdq_graphs import (conv_model, gemm_model, matmul_model, max_abs_ranges, mlp_model,
                        random_feed, run)


def _fp8_plan(model, nodes=None):
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(2)])
    plan = build_plan(model, amax=amax)
    return plan.with_precision(plan.int8_nodes() if nodes is None else nodes, "fp8", "test"), amax


def _opset19(builder):
    m = builder()
    m.opset_import[0].version = 19
    return m


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _reference(model, feed, amax):
    """The FP32 model run on ORT with input and weight fake-quantized in numpy
    (:func:`fake_quantize_fp8`): what the FP8 Q/DQ artifact must compute."""
    w = _inits(model)["W"]
    x = fake_quantize_fp8(feed["x"], fp8_scale(amax["x"]))
    wq = fake_quantize_fp8(w, fp8_scale(float(np.max(np.abs(w)))))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name == "W":
            t.CopyFrom(numpy_helper.from_array(wq, "W"))
    return run(m, {"x": x})["y"]


@pytest.mark.parametrize("builder", [matmul_model, gemm_model, conv_model])
@pytest.mark.parametrize("fp8_weights", [False, True])
def test_fp8_artifact_lints_clean_and_matches_reference(builder, fp8_weights):
    model = _opset19(builder)
    plan, amax = _fp8_plan(model)
    assert plan.counts()["fp8"] == 1 and plan.int8_nodes() == []
    q, qmap = insert_qdq(model, plan, int8_weights=fp8_weights)
    assert lint_qdq(q) == []
    inits = _inits(q)
    zps = [inits[n] for n, e in qmap.tensors.items() if e.role == "zero_point"]
    assert zps and all(z.dtype == FP8_DTYPE and z.size == 1 for z in zps)
    scales = [inits[n] for n, e in qmap.tensors.items() if e.role == "scale"]
    assert all(s.size == 1 for s in scales)  # activations and weights per tensor
    if fp8_weights:
        w_q = [n for n, e in qmap.tensors.items() if e.original == "W" and e.role == "quantized"]
        assert inits[w_q[0]].dtype == FP8_DTYPE  # an FP8 initializer behind one DQ
    feed = random_feed(model, 7)
    got = run(q, feed, qdq=True)["y"]
    ref = _reference(model, feed, amax)
    fp32 = run(model, feed)["y"]
    err_fp8 = float(np.max(np.abs(fp32 - ref)))
    assert err_fp8 > 1e-3  # FP8 really rounded something
    np.testing.assert_array_equal(got, ref)  # same float layer on the same FP8 values


def test_int8_and_fp8_nodes_in_one_graph():
    model = _opset19(mlp_model)
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(2)])
    plan = build_plan(model, amax=amax)
    first, second = plan.int8_nodes()[:2]
    mixed = plan.with_precision(second, Precision.FP8, "test")
    q, qmap = insert_qdq(model, mixed)
    assert lint_qdq(q) == []
    inits = _inits(q)
    zp_types = {e.consumer: inits[n].dtype for n, e in qmap.tensors.items()
                if e.role == "zero_point"}
    assert zp_types[first] == np.int8 and zp_types[second] == FP8_DTYPE
    # the INT8 node's Q/DQ are those of the INT8-only artifact
    q8, _ = insert_qdq(model, plan)
    int8_only = {n.name: n for n in q8.graph.node if n.name.endswith(f"_{first}")}
    assert int8_only and all(
        n.SerializeToString() == int8_only[n.name].SerializeToString()
        for n in q.graph.node if n.name in int8_only)


def test_fp8_refused_below_opset_19_and_for_ort_cpu():
    model = matmul_model()  # opset 17
    plan, _ = _fp8_plan(model)
    with pytest.raises(GraphEditError, match="opset 19"):
        insert_qdq(model, plan)
    with pytest.raises(GraphEditError, match="tensorrt"):
        insert_qdq(_opset19(matmul_model), _fp8_plan(_opset19(matmul_model))[0],
                   target="ort_cpu")


def _rules(violations):
    return {v.rule for v in violations}


def test_fp8_lint_rules_fire():
    model = _opset19(matmul_model)
    q, _ = insert_qdq(model, _fp8_plan(model)[0])
    inits = {t.name: t for t in q.graph.initializer}
    # per-channel FP8 weight scales
    bad = onnx.ModelProto()
    bad.CopyFrom(q)
    n = inits["W"].dims[1]
    for t in bad.graph.initializer:
        if t.name == "W__scale_mm":
            t.CopyFrom(numpy_helper.from_array(np.full(n, 0.01, np.float32), t.name))
        if t.name == "W__zp_mm":
            t.CopyFrom(numpy_helper.from_array(np.zeros(n, FP8_DTYPE), t.name))
    for node in bad.graph.node:
        if node.name in ("W__QuantizeLinear_mm", "W__DequantizeLinear_mm"):
            node.attribute.append(helper.make_attribute("axis", 1))
    assert "fp8-weight-per-channel" in _rules(lint_qdq(bad))
    # opset below 19, non-zero FP8 zero point, FP8 read by a non-GEMM op
    low = onnx.ModelProto()
    low.CopyFrom(q)
    low.opset_import[0].version = 17
    for t in low.graph.initializer:
        if t.name == "x__zp_mm":
            t.CopyFrom(numpy_helper.from_array(np.array(1.0, FP8_DTYPE), t.name))
    low.graph.node.append(helper.make_node("Relu", ["x__dq_mm"], ["r"], name="relu"))
    low.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    got = _rules(lint_qdq(low))
    assert {"fp8-opset", "fp8-zero-point-nonzero", "fp8-consumer"} <= got
    assert set(FP8_RULES) >= {r for r in got if r.startswith("fp8-")}
