"""Opt-in opset >= 19 Q/DQ with float16 scales for FP16-remainder artifacts
(``convert_fp16(..., qdq_scale_dtype="fp16")``): no Cast(fp16 -> fp32) -> Q in front of the
INT8 layers, lint-clean, runs in ONNX Runtime and matches the default scheme numerically."""

import numpy as np
import onnx
import pytest

from quantkit.backends.ort import OrtRunner
from quantkit.errors import ConfigError
from quantkit.precision.plan import build_plan
from quantkit.qdq.casts import FP16_QDQ_OPSET, convert_fp16, emulate_fp16, node_compute_dtypes
from quantkit.graph.facts import FLOAT, FLOAT16, constant_arrays, opset_version
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import lint_qdq
from qdq_graphs import max_abs_ranges, mlp_model, random_feed


def _artifacts():
    model = mlp_model()
    feeds = [random_feed(model, s) for s in range(4)]
    plan = build_plan(model, amax=max_abs_ranges(model, feeds))
    assert plan.int8_nodes() and plan.nodes_with("fp16")
    q, _ = insert_qdq(model, plan)
    return model, plan, q, feeds


def _casts_into_q(m):
    prod = {o: n for n in m.graph.node for o in n.output}
    return [n for n in m.graph.node if n.op_type == "QuantizeLinear"
            and n.input[0] in prod and prod[n.input[0]].op_type == "Cast"
            and prod[n.input[0]].attribute[0].i == FLOAT]


def test_fp16_scales_drop_the_casts_in_front_of_q_and_lint_clean():
    _, plan, q, _ = _artifacts()
    default = convert_fp16(q, plan)
    f16 = convert_fp16(q, plan, qdq_scale_dtype="fp16")
    assert opset_version(default) == 17 and opset_version(f16) >= FP16_QDQ_OPSET
    assert _casts_into_q(default) and not _casts_into_q(f16)
    n_casts = {k: sum(n.op_type == "Cast" for n in m.graph.node)
               for k, m in (("default", default), ("fp16", f16))}
    assert n_casts["fp16"] < n_casts["default"], n_casts
    consts = constant_arrays(f16.graph)
    for n in f16.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            assert consts[n.input[1]].dtype == np.float16, n.name
    vi = {v.name: v.type.tensor_type.elem_type for v in f16.graph.value_info}
    dq_out = [n.output[0] for n in f16.graph.node if n.op_type == "DequantizeLinear"]
    assert dq_out and all(vi[t] == FLOAT16 for t in dq_out)
    dtypes = node_compute_dtypes(q, plan, qdq_scale_dtype="fp16")
    assert all(dtypes[n] == "fp16" for n in plan.int8_nodes())
    assert lint_qdq(f16) == [] and lint_qdq(default) == []
    onnx.checker.check_model(f16, full_check=True)


def test_fp16_scales_run_in_ort_and_match_the_default():
    model, plan, q, feeds = _artifacts()
    default = convert_fp16(q, plan)
    f16 = convert_fp16(q, plan, qdq_scale_dtype="fp16")
    emu = emulate_fp16(q, plan, qdq_scale_dtype="fp16")
    x = np.concatenate([f["x"] for f in feeds])
    outs = {}
    for name, m in (("fp32", model), ("default", default), ("fp16", f16), ("emu", emu)):
        with OrtRunner(m, qdq_mode="exact") as r:
            outs[name] = r.infer({"x": x})["logits"]
    ref = outs["fp32"]
    scale = np.abs(ref).max()
    err_default = np.abs(outs["default"] - ref).max()
    err_fp16 = np.abs(outs["fp16"] - ref).max()
    # the same INT8 quantization; FP16 scales round each scale by <= 2^-11 relative
    assert err_fp16 < max(2 * err_default, 0.02 * scale), (err_fp16, err_default)
    np.testing.assert_allclose(outs["fp16"], outs["default"], atol=0.02 * scale)
    np.testing.assert_allclose(outs["emu"], outs["fp16"], atol=0.01 * scale)
    agree = (outs["fp16"].argmax(1) == outs["default"].argmax(1)).mean()
    assert agree >= 0.95


def test_a_scale_below_fp16_normal_keeps_its_pair_fp32():
    model, plan, _, _ = _artifacts()
    tiny = dict(plan.activation_amax)
    tiny["h3"] = 127 * 2.0 ** -20  # the second MatMul's input: scale 2^-20 < 2^-14
    plan_tiny = build_plan(model, amax=tiny)
    qt, _ = insert_qdq(model, plan_tiny)
    f16 = convert_fp16(qt, plan_tiny, qdq_scale_dtype="fp16")
    consts = constant_arrays(f16.graph)
    scales = {n.input[0]: consts[n.input[1]].dtype for n in f16.graph.node
              if n.op_type == "QuantizeLinear"}
    assert np.float32 in scales.values() and np.float16 in scales.values()
    assert lint_qdq(f16) == []
    with OrtRunner(f16, qdq_mode="exact") as r:
        assert np.isfinite(r.infer({"x": random_feed(model, 9)["x"]})["logits"]).all()


def test_fp16_scales_need_an_fp16_remainder():
    model, _, _, feeds = _artifacts()
    plan32 = build_plan(model, amax=max_abs_ranges(model, feeds), remainder="fp32")
    q, _ = insert_qdq(model, plan32)
    with pytest.raises(ConfigError, match="FP16 remainder"):
        convert_fp16(q, plan32, qdq_scale_dtype="fp16")
    with pytest.raises(ConfigError, match="unknown Q/DQ scale dtype"):
        convert_fp16(q, plan32, qdq_scale_dtype="bf16")


def test_minilm_fp16_scales_are_lint_clean_and_drop_the_casts_into_q(minilm_model):
    """The real MiniLM graph (bert_int8's prepared model), all 48 MatMuls INT8."""
    from quantkit.graph.facts import ensure_node_names

    m = onnx.load(str(minilm_model))
    ensure_node_names(m)
    mm = [n for n in m.graph.node if n.op_type == "MatMul"]
    amax = {t: 8.0 for n in mm for t in n.input}
    plan = build_plan(m, amax=amax)
    assert len(plan.int8_nodes()) == 48
    q, _ = insert_qdq(m, plan)
    default = convert_fp16(q, plan)
    f16 = convert_fp16(q, plan, qdq_scale_dtype="fp16")
    assert opset_version(f16) >= FP16_QDQ_OPSET
    assert len(_casts_into_q(default)) > 0 and _casts_into_q(f16) == []
    assert lint_qdq(f16) == []
    dtypes = node_compute_dtypes(q, plan, qdq_scale_dtype="fp16")
    assert all(dtypes[n] == "fp16" for n in plan.int8_nodes())
