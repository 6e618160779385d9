"""Deployment targets: the ort_cpu realization of a Plan on a small attention-like graph built
in code (uint8 zero points, per-consumer pairs, a real ORT session, real INT8 kernel fusion),
its lint, and the `target` setting."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from qdq_graphs import (initializer, init, make_model, nodes_by_op, producer_of, qdq_pair_into,
                        random_feed, residual_model, run, sqnr_db, weight)
from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner
from quantkit.errors import ConfigError
from quantkit.precision.plan import Plan, build_plan
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.placement import ort_cpu_output_tensors, residual_add_inputs
from quantkit.qdq.lint import lint_for_target, lint_ort_cpu, lint_qdq
from quantkit.qdq.targets import TARGETS, get_target, uint8_qparams

F = onnx.TensorProto.FLOAT
INT8_KERNELS = {"MatMulIntegerToFloat", "QLinearMatMul", "QLinearConv", "MatMulInteger"}


def attention_model(seed: int = 0, s: int = 16, d: int = 32, d_out: int = 16) -> onnx.ModelProto:
    """x feeds three projections; softmax(q k^T) @ v -> output projection (attention-like)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q"], name="mm_q"),
             helper.make_node("MatMul", ["x", "Wk"], ["k"], name="mm_k"),
             helper.make_node("MatMul", ["x", "Wv"], ["v"], name="mm_v"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kT", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"], name="bmm_qk"),
             helper.make_node("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["ctx"], name="bmm_pv"),
             helper.make_node("MatMul", ["ctx", "Wo"], ["mo"], name="mm_o"),
             helper.make_node("Add", ["mo", "bo"], ["y"], name="bias_o")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", s, d])],
                      [helper.make_tensor_value_info("y", F, ["N", s, d_out])],
                      [init("Wq", weight(rng, d, d)), init("Wk", weight(rng, d, d)),
                       init("Wv", weight(rng, d, d)), init("Wo", weight(rng, d, d_out)),
                       init("bo", weight(rng, d_out, scale=0.1))])


def _feeds(model, n=4):
    # shift the input so activations are asymmetric (a symmetric range would hide zero points)
    return [{k: v + 0.5 for k, v in random_feed(model, seed).items()} for seed in range(n)]


def _min_max(model, feeds) -> dict[str, tuple[float, float]]:
    """Signed (min, max) of every float tensor over real ORT runs."""
    names = [i.name for i in model.graph.input] + [o for n in model.graph.node for o in n.output]
    out: dict[str, tuple[float, float]] = {}
    with OrtRunner(model, extra_outputs=names) as r:
        for feed in feeds:
            for name, v in r.infer(feed).items():
                if np.issubdtype(v.dtype, np.floating):
                    lo, hi = out.get(name, (np.inf, -np.inf))
                    out[name] = (min(lo, float(v.min())), max(hi, float(v.max())))
    return out


def _plan(model, feeds) -> Plan:
    mm = _min_max(model, feeds)
    plan = build_plan(model, amax={t: max(-lo, hi) for t, (lo, hi) in mm.items()},
                      calibrator="max")
    return dataclasses.replace(plan, activation_range={t: mm[t] for t in plan.activation_amax})


@pytest.fixture(scope="module")
def realized():
    model = attention_model()
    feeds = _feeds(model)
    plan = _plan(model, feeds)
    q, qmap = insert_qdq(model, plan, target="ort_cpu")
    return model, feeds, plan, q, qmap


def test_uint8_qparams_clip_to_amax_include_zero_and_handle_all_zero():
    scale, zp = uint8_qparams(4.0, -1.0, 3.0)
    assert scale.dtype == np.float32 and zp.dtype == np.uint8
    assert scale == np.float32(4.0 / 255) and int(zp) == round(1.0 / (4.0 / 255))
    scale, zp = uint8_qparams(2.0, -10.0, 10.0)  # the calibrator's clip wins over min / max
    assert scale == np.float32(4.0 / 255) and int(zp) in (127, 128)  # 127.5 in float32
    scale, zp = uint8_qparams(1.0, 0.0, 1.0)  # post-Softmax: all 256 levels, zero point 0
    assert scale == np.float32(1.0 / 255) and int(zp) == 0
    scale, zp = uint8_qparams(5.0, 2.0, 5.0)  # 0 stays exactly representable
    assert int(zp) == 0 and scale == np.float32(5.0 / 255)
    scale, zp = uint8_qparams(3.0, -3.0, -1.0)
    assert int(zp) == 255
    scale, zp = uint8_qparams(0.0, 0.0, 0.0)  # all-zero tensor: a valid positive scale
    assert scale > 0 and int(zp) == 0
    scale, zp = uint8_qparams(2.0, None, None)  # no min / max: the symmetric clip
    assert scale == np.float32(4.0 / 255) and int(zp) in (127, 128)


def test_ort_cpu_activations_are_uint8_with_zero_points_from_the_calibrated_range(realized):
    model, feeds, plan, q, _ = realized
    assert plan.int8_nodes() == ["mm_q", "mm_k", "mm_v", "bmm_qk", "bmm_pv", "mm_o"]
    for node, slot, tensor in (("mm_q", 0, "x"), ("bmm_qk", 0, "q"), ("bmm_qk", 1, "kt"),
                               ("bmm_pv", 0, "p"), ("bmm_pv", 1, "v"), ("mm_o", 0, "ctx")):
        qn, dq = qdq_pair_into(q, node, slot)
        assert qn.input[0] == tensor and dq.input[1:] == qn.input[1:]
        zp, scale = initializer(q, qn.input[2]), initializer(q, qn.input[1])
        assert zp.dtype == np.uint8 and zp.shape == () and scale.shape == ()
        lo, hi = plan.activation_range[tensor]
        lo, hi = min(max(lo, -plan.activation_amax[tensor]), 0.0), max(hi, 0.0)
        assert scale == pytest.approx((hi - lo) / 255, rel=1e-6)
        assert int(zp) == int(np.clip(np.rint(-lo / float(scale)), 0, 255))
    p_zp = initializer(q, qdq_pair_into(q, "bmm_pv", 0)[0].input[2])
    assert int(p_zp) == 0  # Softmax output is >= 0: zero point 0, all 256 levels used
    x_zp = initializer(q, qdq_pair_into(q, "mm_q", 0)[0].input[2])
    assert 0 < int(x_zp) < 128  # shifted input: asymmetric, more levels above 0 than below


def test_ort_cpu_weights_are_int8_per_channel_and_every_consumer_has_its_own_pair(realized):
    model, feeds, plan, q, qmap = realized
    for node, w in (("mm_q", "Wq"), ("mm_k", "Wk"), ("mm_v", "Wv"), ("mm_o", "Wo")):
        qn, dq = qdq_pair_into(q, node, 1)
        assert qn.input[0] == w
        zp = initializer(q, qn.input[2])
        assert zp.dtype == np.int8 and not zp.any()
        assert zp.shape == (initializer(q, w).shape[1],)
        assert next(a.i for a in qn.attribute if a.name == "axis") == 1
    x_qs = [n for n in nodes_by_op(q, "QuantizeLinear") if n.input[0] == "x"]
    assert len(x_qs) == 1  # one Q per tensor (ORT's layout), one DQ per reader
    x_dqs = [n for n in nodes_by_op(q, "DequantizeLinear") if n.input[0] == x_qs[0].output[0]]
    assert len(x_dqs) == 3
    dq_outs = qmap.inserted_for("x")
    assert len(set(dq_outs)) == 3
    readers = {t: [n.name for n in q.graph.node if t in n.input] for t in dq_outs}
    assert sorted(r for rs in readers.values() for r in rs) == ["mm_k", "mm_q", "mm_v"]
    assert all(len(rs) == 1 for rs in readers.values())
    assert lint_ort_cpu(q) == [] and lint_for_target(q, "ort_cpu") == []
    # TensorRT's rules reject what ort_cpu needs: uint8, non-zero zero points
    trt_rules = {v.rule for v in lint_qdq(q)}
    assert {"zero-point-dtype", "zero-point-nonzero"} <= trt_rules


def test_ort_cpu_graph_runs_in_onnx_runtime_close_to_fp32(realized):
    model, feeds, plan, q, _ = realized
    onnx.checker.check_model(q, full_check=True)
    for feed in feeds[:2]:
        ref, out = run(model, feed), run(q, feed, qdq=True)
        assert sqnr_db(ref["y"], out["y"]) > 25
    # the tensorrt realization of the same plan is symmetric int8 and as close on this graph
    trt, _ = insert_qdq(model, plan)
    assert lint_qdq(trt) == []
    assert all(initializer(trt, n.input[2]).dtype == np.int8 for n in nodes_by_op(trt, "QuantizeLinear"))


def test_onnx_runtime_fuses_every_ort_cpu_int8_node_into_an_int8_kernel(realized, tmp_path: Path):
    model, feeds, plan, q, _ = realized
    opt = tmp_path / "optimized.onnx"
    with OrtRunner(q, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS, save_optimized_to=opt) as r:
        r.infer(feeds[0])
    optimized = onnx.load(str(opt))
    by_name = {n.name: n.op_type for n in optimized.graph.node}
    kernels = {n: by_name.get(n) for n in plan.int8_nodes()}
    assert all(op in INT8_KERNELS for op in kernels.values()), kernels
    float_matmuls = [n.name for n in optimized.graph.node if n.op_type in ("MatMul", "FusedMatMul")]
    assert float_matmuls == []


def test_ort_cpu_residual_add_is_quantized_only_with_the_conv_output_ranges():
    model = residual_model()
    feeds = [random_feed(model, s) for s in range(3)]
    mm = _min_max(model, feeds)
    # what a tensorrt run calibrates: INT8 inputs + residual skips (no Conv / Add outputs)
    trt_scope = {"x", "r"}
    plan = build_plan(model, amax={t: max(-lo, hi) for t, (lo, hi) in mm.items()
                                   if t in trt_scope})
    skips = residual_add_inputs(model, plan)
    assert skips == ["r"]  # the tensorrt target quantizes them (TRT rule 6)
    assert ort_cpu_output_tensors(model, plan) == ["r", "c2", "s"]  # ort_cpu calibrates these
    plan = dataclasses.replace(plan, activation_range=mm)
    trt, trt_map = insert_qdq(model, plan, target="tensorrt")
    cpu, cpu_map = insert_qdq(model, plan, target="ort_cpu")

    def readers(qmap, tensors):
        return {e.consumer for e in qmap.tensors.values()
                if e.role == "dequantized" and e.original in tensors}

    assert "res_add" in readers(trt_map, skips)
    # r is conv1's (Relu'd) output: every reader goes through a DQ so conv1 fuses; without a
    # range for conv2's output the Add cannot be QLinearAdd: its output stays float
    assert readers(cpu_map, {"r"}) == {"conv2", "res_add"} and lint_ort_cpu(cpu) == []
    assert not readers(cpu_map, {"c2", "s"})
    # with the ranges ort_cpu calibrates, the Add reads both inputs through DQs, its
    # output is quantized, and conv2's output is read through DQs only
    full = build_plan(model, amax={t: max(-lo, hi) for t, (lo, hi) in mm.items()})
    full = dataclasses.replace(full, activation_range=mm)
    cpu, cpu_map = insert_qdq(model, full, target="ort_cpu")
    assert readers(cpu_map, {"r"}) == {"conv2", "res_add"}
    assert readers(cpu_map, {"c2"}) == {"res_add"} and readers(cpu_map, {"s"}) == {"relu2"}
    assert lint_ort_cpu(cpu) == []
    assert sqnr_db(run(model, feeds[0])["y"], run(cpu, feeds[0], qdq=True)["y"]) > 25
    # the tensorrt realization ignores the extra ranges: byte-identical
    trt_full, _ = insert_qdq(model, dataclasses.replace(
        full, activation_amax={t: full.activation_amax[t] for t in trt_scope}), target="tensorrt")
    trt_scoped, _ = insert_qdq(model, plan, target="tensorrt")
    assert trt_full.SerializeToString() == trt_scoped.SerializeToString()


def test_missing_activation_range_falls_back_to_the_symmetric_clip():
    model = attention_model()
    plan = dataclasses.replace(_plan(model, _feeds(model, 2)), activation_range={})
    q, _ = insert_qdq(model, plan, target="ort_cpu")
    qn, _ = qdq_pair_into(q, "mm_q", 0)
    assert int(initializer(q, qn.input[2])) in (127, 128)  # [-amax, amax]: the middle code
    assert lint_ort_cpu(q) == []


def test_lint_ort_cpu_flags_int8_activations_and_shared_dq():
    model = attention_model()
    plan = _plan(model, _feeds(model, 2))
    trt, _ = insert_qdq(model, plan, target="tensorrt")
    # TensorRT's layout: int8 activations, and x quantized once per consumer
    assert {v.rule for v in lint_ort_cpu(trt)} == {"activation-not-uint8", "q-not-shared"}
    cpu, _ = insert_qdq(model, plan, target="ort_cpu")
    # make mm_k read mm_q's DQ output: one DQ, two consumers
    dq_q = qdq_pair_into(cpu, "mm_q", 0)[1].output[0]
    mm_k = next(n for n in cpu.graph.node if n.name == "mm_k")
    mm_k.input[0] = dq_q
    assert "dq-shared" in {v.rule for v in lint_ort_cpu(cpu)}


def test_plan_round_trips_activation_range_and_with_precision_keeps_it():
    model = attention_model()
    plan = _plan(model, _feeds(model, 2))
    assert Plan.from_dict(plan.to_dict()) == plan
    kept = plan.with_precision("mm_o", "fp32", "test")
    assert kept.activation_range == plan.activation_range


def test_unknown_target_is_one_config_error_line():
    assert TARGETS == ("tensorrt", "ort_cpu")
    with pytest.raises(ConfigError) as err:
        get_target("tensorrt_llm")
    assert "target" in str(err.value) and "\n" not in str(err.value)


def _settings(*overrides):
    import quantkit

    return quantkit.configure(["experiment=bert_int8", *overrides])


def test_target_setting_defaults_to_tensorrt_and_ort_cpu_forces_fp32_remainder():
    s = _settings()
    assert s.target == "tensorrt" and s.precision.remainder == "fp16"
    s = _settings("target=ort_cpu")
    assert s.target == "ort_cpu" and s.precision.remainder == "fp32"


@pytest.mark.parametrize("overrides", [("target=trt",), ("target=ort_cpu", "backend=trt")])
def test_bad_target_is_one_line_naming_the_key(overrides):
    with pytest.raises(ConfigError) as err:
        _settings(*overrides)
    msg = str(err.value)
    assert "target" in msg and "\n" not in msg and "Fix:" in msg


def conv_chain_model(seed: int = 0, c: int = 16) -> onnx.ModelProto:
    """x -> Conv1(bias) -> Relu -> Conv2(bias) -> y: Conv1's output is quantized for Conv2."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "W1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "W2", "b2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", c, 8, 8])],
                      [helper.make_tensor_value_info("y", F, ["N", c, 8, 8])],
                      [init("W1", weight(rng, c, c, 3, 3)), init("b1", weight(rng, c, scale=0.1)),
                       init("W2", weight(rng, c, c, 3, 3)), init("b2", weight(rng, c, scale=0.1))])


def test_ort_cpu_conv_bias_is_int32_and_onnx_runtime_fuses_qlinearconv(tmp_path: Path):
    model = conv_chain_model()
    feeds = [random_feed(model, s) for s in range(3)]
    plan = _plan(model, feeds)
    assert plan.int8_nodes() == ["conv1", "conv2"]
    q, qmap = insert_qdq(model, plan, target="ort_cpu")
    assert lint_ort_cpu(q) == []
    conv1 = next(n for n in q.graph.node if n.name == "conv1")
    bias_dq = producer_of(q, conv1.input[2])
    assert bias_dq.op_type == "DequantizeLinear"
    b_q, b_scale = initializer(q, bias_dq.input[0]), initializer(q, bias_dq.input[1])
    x_scale = initializer(q, qdq_pair_into(q, "conv1", 0)[0].input[1])
    w_scale = initializer(q, qdq_pair_into(q, "conv1", 1)[0].input[1])
    assert b_q.dtype == np.int32 and b_scale.shape == (16,)
    np.testing.assert_allclose(b_scale, x_scale * w_scale, rtol=1e-6)
    np.testing.assert_allclose(b_q * b_scale, initializer(model, "b1"), atol=float(b_scale.max()))
    trt, _ = insert_qdq(model, plan, target="tensorrt")  # TensorRT keeps float biases
    assert producer_of(trt, next(n for n in trt.graph.node if n.name == "conv1").input[2]) is None
    assert sqnr_db(run(model, feeds[0])["y"], run(q, feeds[0], qdq=True)["y"]) > 25
    opt = tmp_path / "optimized.onnx"
    with OrtRunner(q, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS, save_optimized_to=opt):
        pass
    # ORT's NHWC layout pass renames the fused node <name>_token_<k>
    ops = {n.name.split("_token_")[0]: n.op_type for n in onnx.load(str(opt)).graph.node
           if n.op_type not in ("Transpose", "QuantizeLinear", "DequantizeLinear")}
    # conv1 -> Relu -> Q fuses (Relu folds into the uint8 Q); conv2 writes a float graph
    # output and ORT CPU has no INT8 Conv with float output, so it stays float
    assert ops.get("conv1") == "QLinearConv"


def mobilenet_block_model(seed: int = 0, c: int = 16, e: int = 32) -> onnx.ModelProto:
    """A MobileNetV2-like stem + inverted-residual block + head, built in code:

    x -> conv_in -> Clip(0, 6) -> h -> conv_p0 (projection, no activation) -> p
    p -> conv_e -> Clip(0, 6) -> conv_p1 (projection) -> c;  Add(p, c) -> s   (residual)
    s -> conv_out -> Clip(0, 6) -> GlobalAveragePool -> Flatten -> y
    """
    rng = np.random.default_rng(seed)
    six = [init("lo", np.array(0.0, np.float32)), init("hi", np.array(6.0, np.float32))]

    def conv(name, x, y, w, b):
        return helper.make_node("Conv", [x, w, b], [y], name=name, pads=[1, 1, 1, 1])

    nodes = [conv("conv_in", "x", "ci", "W0", "B0"),
             helper.make_node("Clip", ["ci", "lo", "hi"], ["h"], name="clip_in"),
             conv("conv_p0", "h", "p", "W1", "B1"),
             conv("conv_e", "p", "ce", "W2", "B2"),
             helper.make_node("Clip", ["ce", "lo", "hi"], ["e"], name="clip_e"),
             conv("conv_p1", "e", "c", "W3", "B3"),
             helper.make_node("Add", ["p", "c"], ["s"], name="res_add"),
             conv("conv_out", "s", "co", "W4", "B4"),
             helper.make_node("Clip", ["co", "lo", "hi"], ["o"], name="clip_out"),
             helper.make_node("GlobalAveragePool", ["o"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["y"], name="flatten", axis=1)]
    shapes = {"W0": (c, 3), "W1": (c, c), "W2": (e, c), "W3": (c, e), "W4": (e, c)}
    inits = six + [init(w, weight(rng, o, i, 3, 3)) for w, (o, i) in shapes.items()]
    inits += [init(f"B{k}", weight(rng, shapes[f"W{k}"][0], scale=0.1)) for k in range(5)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 8, 8])],
                      [helper.make_tensor_value_info("y", F, ["N", e])], inits)


@pytest.fixture(scope="module")
def cnn_realized():
    model = mobilenet_block_model()
    feeds = [random_feed(model, s) for s in range(4)]
    plan = _plan(model, feeds)
    q, qmap = insert_qdq(model, plan, target="ort_cpu")
    return model, feeds, plan, q, qmap


def test_ort_cpu_lists_the_conv_add_and_pool_outputs_to_calibrate(cnn_realized):
    model, _, plan, _, _ = cnn_realized
    assert plan.int8_nodes() == ["conv_in", "conv_p0", "conv_e", "conv_p1", "conv_out"]
    # Conv outputs past their Clip, the residual Add's and the pool's output
    assert ort_cpu_output_tensors(model, plan) == ["h", "p", "e", "c", "s", "o", "g"]


def test_ort_cpu_cnn_has_one_q_per_tensor_and_quantized_conv_add_pool_outputs(cnn_realized):
    model, feeds, plan, q, qmap = cnn_realized
    assert lint_ort_cpu(q) == []
    onnx.checker.check_model(q, full_check=True)
    qs = [n for n in nodes_by_op(q, "QuantizeLinear")
          if n.input[0] not in {i.name for i in q.graph.initializer}]
    assert sorted(n.input[0] for n in qs) == sorted(["x", "h", "p", "e", "c", "s", "o", "g"])
    by_out = {n.output[0]: n for n in qs}
    for t, readers in (("p", {"conv_e", "res_add"}), ("c", {"res_add"}), ("s", {"conv_out"}),
                       ("g", {"flatten"})):
        dqs = [n for n in nodes_by_op(q, "DequantizeLinear")
               if n.input[0] in by_out and by_out[n.input[0]].input[0] == t]
        got = {r.name for d in dqs for r in q.graph.node if d.output[0] in r.input}
        assert got == readers and len(dqs) == len(readers), t  # one DQ per reader
    # the Q after a Clip(0, 6) represents a range inside [0, 6] (ORT folds the Clip)
    for t in ("h", "e", "o"):
        qn = next(n for n in qs if n.input[0] == t)
        scale, zp = initializer(q, qn.input[1]), initializer(q, qn.input[2])
        assert zp.dtype == np.uint8 and int(zp) == 0
        assert np.float32(255 - int(zp)) * scale <= np.float32(6.0)
    for feed in feeds[:2]:
        assert sqnr_db(run(model, feed)["y"], run(q, feed, qdq=True)["y"]) > 20


def test_onnx_runtime_runs_the_cnn_as_qlinearconv_qlinearadd_chain(cnn_realized, tmp_path: Path):
    model, feeds, plan, q, _ = cnn_realized
    opt = tmp_path / "optimized.onnx"
    with OrtRunner(q, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS, save_optimized_to=opt) as r:
        out = r.infer(feeds[0])
    assert sqnr_db(run(model, feeds[0])["y"], out["y"]) > 20
    optimized = onnx.load(str(opt))
    ops = {n.name.split("_token_")[0]: n.op_type for n in optimized.graph.node
           if n.op_type not in ("Transpose", "QuantizeLinear", "DequantizeLinear")}
    assert {n: ops.get(n) for n in plan.int8_nodes()} == dict.fromkeys(plan.int8_nodes(),
                                                                       "QLinearConv")
    census = [n.op_type for n in optimized.graph.node]
    assert census.count("QLinearAdd") == 1 and "Add" not in census
    assert "QLinearGlobalAveragePool" in census
    assert not {"Conv", "FusedConv", "Clip"} & set(census)
    # uint8 flows from layer to layer: one Q at the input, one DQ before the float Flatten
    assert census.count("QuantizeLinear") == 1 and census.count("DequantizeLinear") == 1


def test_lint_ort_cpu_flags_duplicate_q_and_a_float_read_of_a_quantized_conv_output(cnn_realized):
    _, _, plan, q, _ = cnn_realized
    broken = onnx.ModelProto()
    broken.CopyFrom(q)
    # the residual Add reads conv_p0's output p in float instead of through its DQ
    add = next(n for n in broken.graph.node if n.name == "res_add")
    dq = producer_of(broken, add.input[0])
    assert dq.op_type == "DequantizeLinear"
    add.input[0] = "p"
    rules = [(v.rule, v.node) for v in lint_ort_cpu(broken)]
    assert ("output-not-fused", "conv_p0") in rules
    # a second Q of the same activation (the old one-pair-per-consumer layout)
    q_p = producer_of(broken, dq.input[0])
    dup = onnx.helper.make_node("QuantizeLinear", list(q_p.input), ["p__q_dup"], name="q_dup")
    dup_dq = onnx.helper.make_node("DequantizeLinear", ["p__q_dup", *q_p.input[1:]],
                                   ["p__dq_dup"], name="dq_dup")
    broken.graph.node.extend([dup, dup_dq])
    add.input[0] = "p__dq_dup"
    rules = [(v.rule, v.node) for v in lint_ort_cpu(broken)]
    assert rules == [("q-not-shared", "q_dup")]  # p feeds two Qs (and nothing in float)
    assert lint_ort_cpu(q) == []


def test_missing_conv_output_range_leaves_that_output_float_and_the_graph_clean(cnn_realized):
    model, feeds, plan, _, _ = cnn_realized
    # no range for c (conv_p1's output): conv_p1 keeps a float output, the Add stays float
    # and its output s is quantized only as conv_out's input
    amax = {t: v for t, v in plan.activation_amax.items() if t != "c"}
    partial = dataclasses.replace(plan, activation_amax=amax)
    q, qmap = insert_qdq(model, partial, target="ort_cpu")
    assert lint_ort_cpu(q) == []
    assert not qmap.inserted_for("c")
    assert {e.consumer for e in qmap.tensors.values()
            if e.original == "s" and e.role == "dequantized"} == {"conv_out"}
    assert {e.consumer for e in qmap.tensors.values()
            if e.original == "p" and e.role == "dequantized"} == {"conv_e", "res_add"}
    assert sqnr_db(run(model, feeds[0])["y"], run(q, feeds[0], qdq=True)["y"]) > 20


def test_uint8_qparams_bounds_keep_the_q_range_inside_a_clip():
    for hi in (6.0, 5.999999, 3.3, 1e-3):
        scale, zp = uint8_qparams(hi, 0.0, hi, bounds=(0.0, 6.0))
        assert int(zp) == 0 and np.float32(255) * scale <= np.float32(6.0)
        assert scale == pytest.approx(min(hi, 6.0) / 255, rel=1e-5)
    scale, zp = uint8_qparams(8.0, -1.0, 8.0, bounds=(0.0, 6.0))  # range cut to the Clip
    assert int(zp) == 0 and np.float32(255) * scale <= np.float32(6.0)
    assert scale == pytest.approx(6.0 / 255, rel=1e-5)


def test_a_float_conv_after_an_int8_conv_reads_its_uint8_output(cnn_realized, tmp_path: Path):
    model, feeds, plan, _, _ = cnn_realized
    spared = plan.with_precision("conv_e", "fp32", "test: sensitivity search")
    q, qmap = insert_qdq(model, spared, target="ort_cpu")
    assert lint_ort_cpu(q) == []
    # conv_p0 is INT8: its output p is quantized for every reader, the float conv_e too,
    # so conv_p0 still runs as QLinearConv (ORT CPU has no INT8 Conv with float output)
    assert {e.consumer for e in qmap.tensors.values()
            if e.original == "p" and e.role == "dequantized"} == {"conv_e", "res_add"}
    conv_e = next(n for n in q.graph.node if n.name == "conv_e")
    assert producer_of(q, conv_e.input[1]) is None  # its weight stays float32
    opt = tmp_path / "optimized.onnx"
    with OrtRunner(q, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS, save_optimized_to=opt) as r:
        out = r.infer(feeds[0])
    optimized = onnx.load(str(opt))
    ops = {n.name.split("_token_")[0]: n.op_type for n in optimized.graph.node}
    assert all(ops.get(n) == "QLinearConv" for n in spared.int8_nodes()), ops
    census = [n.op_type for n in optimized.graph.node]
    assert census.count("QLinearConv") == len(spared.int8_nodes()) == 4  # conv_e stays float
    assert sqnr_db(run(model, feeds[0])["y"], out["y"]) > 20


def test_ort_cpu_bias_scale_is_the_real_activation_q_scale_times_the_weight_scale(cnn_realized):
    """QLinearConv needs bias scale == x_scale * w_scale exactly; x_scale is the scale of the Q
    the Conv really reads (for a fused Clip output: the Clip-bounded one)."""
    _, _, _, q, _ = cnn_realized
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    dq = {n.output[0]: n for n in q.graph.node if n.op_type == "DequantizeLinear"}
    checked = 0
    for n in q.graph.node:
        if n.op_type != "Conv" or len(n.input) < 3 or n.input[2] not in dq:
            continue
        x_s, w_s, b_s = (consts[dq[n.input[i]].input[1]] for i in range(3))
        expect = (np.float64(x_s) * w_s.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(b_s.reshape(-1), expect.reshape(-1), err_msg=n.name)
        checked += 1
    assert checked == 5
