"""Bias correction: removes the mean output shift of weight quantization."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ptq_graphs import F, calibrated_plan, init, int8_outputs, make_model, nmse, run
from quantkit.ptq.bias_correction import correct_bias, input_channel_axes, weight_shift
from quantkit.ptq.capture import channel_stats


def _coarse_weight(rng, shape, axis):
    """Weights with one huge value per output channel: a coarse INT8 grid, big rounding."""
    w = rng.standard_normal(shape).astype(np.float32) * 0.3
    idx = [slice(None)] * len(shape)
    other = 1 - axis if len(shape) == 2 else 1
    idx[other] = 0
    w[tuple(idx)] = 20.0
    return w


def linear(rng, k=48, n=16):
    w = _coarse_weight(rng, (k, n), axis=1)
    w[0] = 20.0
    return make_model([helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
                       helper.make_node("Add", ["b", "mm"], ["y"], name="bias")],
                      [helper.make_tensor_value_info("x", F, ["B", k])],
                      [helper.make_tensor_value_info("y", F, ["B", n])],
                      [init("w", w), init("b", np.zeros(n, np.float32))])


def conv(rng, c=8, o=16, group=1):
    w = rng.standard_normal((o, c // group, 3, 3)).astype(np.float32) * 0.3
    w[:, 0, 0, 0] = 20.0
    ins = ["x", "w"] + (["b"] if group == 1 else [])
    inits = [init("w", w)] + ([init("b", np.zeros(o, np.float32))] if group == 1 else [])
    return make_model([helper.make_node("Conv", ins, ["y"], name="conv", pads=[1, 1, 1, 1],
                                        group=group)],
                      [helper.make_tensor_value_info("x", F, ["B", c, 10, 10])],
                      [helper.make_tensor_value_info("y", F, ["B", o, 10, 10])], inits)


def _mean_shift(ref, out, axis):
    other = tuple(a for a in range(ref.ndim) if a != axis)
    return np.abs((out - ref).mean(axis=other))


def _correct(model, feeds, plan):
    axes = input_channel_axes(model, plan.int8_nodes())
    st = channel_stats(model, feeds, axes)
    return correct_bias(model, plan.int8_nodes(), {t: st.mean(t) for t in axes})


@pytest.mark.parametrize("kind", ["linear", "conv", "depthwise"])
def test_bias_correction_removes_the_mean_shift(kind):
    rng = np.random.default_rng(0)
    if kind == "linear":
        model, axis = linear(rng), 1
        feeds = [{"x": (3.0 + rng.standard_normal((64, 48))).astype(np.float32)} for _ in range(4)]
    else:
        model, axis = conv(rng, group=8 if kind == "depthwise" else 1, o=16), 1
        feeds = [{"x": (2.0 + rng.random((8, 8, 10, 10))).astype(np.float32)} for _ in range(3)]
    plan, _ = calibrated_plan(model, feeds)
    ref, before, _ = int8_outputs(model, feeds, plan=plan)
    corrected, rec = _correct(model, feeds, plan)
    assert rec.changes and not rec.skipped
    _, after, _ = int8_outputs(corrected, feeds, plan=plan)
    shift_before = _mean_shift(ref, before, axis).mean()
    shift_after = _mean_shift(ref, after, axis).mean()
    assert shift_after < 0.3 * shift_before
    assert nmse(ref, after) < nmse(ref, before)


def test_weights_on_the_int8_grid_leave_the_fp32_function_unchanged():
    rng = np.random.default_rng(1)
    q = rng.integers(-127, 128, (32, 8)).astype(np.float32)
    q[0] = 127.0
    w = (q * 0.01).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
                        helper.make_node("Add", ["mm", "b"], ["y"], name="bias")],
                       [helper.make_tensor_value_info("x", F, ["B", 32])],
                       [helper.make_tensor_value_info("y", F, ["B", 8])],
                       [init("w", w), init("b", np.ones(8, np.float32))])
    feeds = [{"x": (1.0 + rng.standard_normal((16, 32))).astype(np.float32)}]
    plan, _ = calibrated_plan(model, feeds)
    corrected, rec = _correct(model, feeds, plan)
    onnx.checker.check_model(corrected, full_check=True)
    np.testing.assert_allclose(run(corrected, feeds), run(model, feeds), rtol=1e-6, atol=1e-5)
    assert "mm" in rec.changes


def test_shift_formula_matches_numpy_and_missing_bias_is_added():
    rng = np.random.default_rng(2)
    model = conv(rng, group=1)
    del model.graph.node[0].input[2]
    model.graph.initializer.pop()
    feeds = [{"x": (2.0 + rng.random((4, 8, 10, 10))).astype(np.float32)}]
    plan, _ = calibrated_plan(model, feeds)
    corrected, rec = _correct(model, feeds, plan)
    assert len(corrected.graph.node[0].input) == 3 and "conv" in rec.changes
    node = model.graph.node[0]
    w = onnx.numpy_helper.to_array(model.graph.initializer[0])
    mu = rng.random(8)
    from quantkit.ptq.bias_correction import quantized_weight
    expect = np.einsum("ocij,c->o", quantized_weight(node, w) - w, mu)
    np.testing.assert_allclose(weight_shift(node, w, mu), expect, rtol=1e-6, atol=1e-9)
