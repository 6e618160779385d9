"""Channel shift (Outlier Suppression+): off-centre MatMul / Gemm inputs centred, the
compensation folded into the reader's bias; FP32 function unchanged, INT8 error lower."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ptq_graphs import F, init, int8_outputs, nmse, run
from quantkit.ptq.capture import capture_tensors, channel_stats
from quantkit.ptq.restore import revert_groups
from quantkit.ptq.shift import channel_shift, shift_activations
from quantkit.ptq.smoothquant import smoothable_inputs


def _shift(model, feeds, **kw):
    groups = smoothable_inputs(model)
    st = channel_stats(model, feeds, {t: -1 for t in groups})
    return shift_activations(model, st.low, st.high,
                             {t: st.mean(t) for t in st.absmax}, **kw)


def _gelu_mlp(rng, *, k=32, n=16, bias_add=True, gemm=False):
    """x -> MatMul W1 + b1 -> GELU (an output in [-0.17, ...]: off-centre) -> second
    layer: MatMul + Add(bias) / MatMul alone / Gemm with C."""
    w1 = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32)
    b1 = (rng.standard_normal(k) + 1.0).astype(np.float32)
    w2 = (rng.standard_normal((n, k) if gemm else (k, n)) / np.sqrt(k)).astype(np.float32)
    b2 = (rng.standard_normal(n) * 0.1).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["b1", "m1"], ["a1"], name="fc1_bias"),
             # GELU as BERT's exports spell it: a1 * 0.5 * (1 + erf(a1 / sqrt 2))
             helper.make_node("Div", ["a1", "sqrt2"], ["d"], name="gelu_div"),
             helper.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
             helper.make_node("Add", ["e", "one"], ["e1"], name="gelu_add"),
             helper.make_node("Mul", ["a1", "e1"], ["h"], name="gelu_mul"),
             helper.make_node("Mul", ["h", "half"], ["g"], name="gelu_half")]
    inits = [init("w1", w1), init("b1", b1), init("w2", w2),
             init("sqrt2", np.float32(np.sqrt(2.0))), init("one", np.float32(1.0)),
             init("half", np.float32(0.5))]
    if gemm:
        nodes.append(helper.make_node("Gemm", ["g", "w2", "b2"], ["y"], name="fc2", transB=1,
                                      alpha=0.5, beta=2.0))
        inits.append(init("b2", b2))
        shape = ["B", k]
    elif bias_add:
        nodes += [helper.make_node("MatMul", ["g", "w2"], ["m2"], name="fc2"),
                  helper.make_node("Add", ["m2", "b2"], ["y"], name="fc2_bias")]
        inits.append(init("b2", b2))
        shape = ["B", "T", k]
    else:
        nodes.append(helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2"))
        shape = ["B", "T", k]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("y", F, shape[:-1] + [n])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(rng, shape, n=6):
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("form", ["bias_add", "no_bias", "gemm"])
def test_shift_keeps_the_fp32_function_and_centres_the_tensor(form):
    rng = np.random.default_rng(0)
    model = _gelu_mlp(rng, bias_add=form == "bias_add", gemm=form == "gemm")
    feeds = _feeds(rng, (8, 32) if form == "gemm" else (4, 8, 32))
    shifted, rec = _shift(model, feeds)
    onnx.checker.check_model(shifted)
    np.testing.assert_allclose(run(shifted, feeds), run(model, feeds), rtol=1e-4, atol=1e-4)
    assert "g" in rec.changes and "x" in rec.skipped  # x ~ N(0, 1): already centred
    ops = [n.op_type for n in shifted.graph.node]
    assert ops.count("Sub") == 1
    # the compensation went into the existing bias, else one new Add
    assert ops.count("Add") == {"bias_add": 3, "no_bias": 3, "gemm": 2}[form]
    before = np.concatenate([v.reshape(-1, 32) for v in
                             capture_tensors(model, feeds, ["g"])["g"]])
    after = np.concatenate([v.reshape(-1, 32) for v in
                            capture_tensors(shifted, feeds, ["g__shifted"])["g__shifted"]])
    mid = (before.min(0) + before.max(0)) / 2
    full = (mid >= 0) & (mid <= 2 * before.mean(0))  # centred: the midpoint is near the mean
    assert 0 < full.sum() < 32
    assert np.allclose(after.min(0)[full], -after.max(0)[full], atol=1e-5)
    # no channel's second moment grows (the weight error x @ dW grows with it)
    assert np.all((after ** 2).mean(0) <= (before ** 2).mean(0) * (1 + 1e-5) + 1e-6)
    assert np.max(np.abs(after)) < 0.8 * np.max(np.abs(before))
    # a plan that keeps fc2 out of INT8 runs the original group back
    restored, names = revert_groups(shifted, model, rec.groups, keep=["fc1"])
    assert "fc2" in names and [n.op_type for n in restored.graph.node] == \
        [n.op_type for n in model.graph.node]
    assert np.array_equal(run(restored, feeds), run(model, feeds))


def test_shift_lowers_the_int8_error_of_an_off_centre_input():
    rng = np.random.default_rng(1)
    model = _gelu_mlp(rng)
    feeds = _feeds(rng, (4, 8, 32))
    ref, before, _ = int8_outputs(model, feeds)
    shifted, _ = _shift(model, feeds)
    ref2, after, _ = int8_outputs(shifted, feeds)
    np.testing.assert_allclose(ref2, ref, rtol=1e-4, atol=1e-4)
    assert nmse(ref, after) < 0.7 * nmse(ref, before)  # 1.6e-4 -> 0.9e-4 measured


def test_a_sparse_channel_is_not_made_dense():
    """A ReLU-like channel, 0 on most tokens and large on a few, keeps its zeros: its
    midpoint is far above its mean, so its shift is clipped to 2 * mean; a channel
    centred on an offset (a LayerNorm's beta) is centred."""
    lo, hi = np.array([0.0, 4.0, -3.0]), np.array([10.0, 6.0, -1.0])
    mean = np.array([0.2, 5.0, -2.0])
    np.testing.assert_allclose(channel_shift(lo, hi, mean), [0.4, 5.0, -2.0])
    np.testing.assert_allclose(channel_shift(lo, hi, np.array([-0.1, 0.0, 0.5])), 0.0)
