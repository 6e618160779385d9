"""Hessian-aware weight rounding (GPTQ): lower INT8 output error than round-to-nearest, on
the TensorRT grid (same per-channel scale, int8 values in [-127, 127]), exact statistics."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from ptq_graphs import (F, calibrated_plan, init, int8_outputs, make_model, nmse,
                        refined_model, run)
from quantkit.settings.ptq_recipe import Recipe
from quantkit.ptq.weight_rounding import (accumulate_hessian, gptq_round, input_hessians,
                                          round_weights, rounding_layers)
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.scales import int8_scale, weight_amax_per_channel


def conv(rng, *, c=6, o=8, group=1, stride=1, pads=(1, 1, 1, 1), dilation=1, hw=9,
         coarse=False):
    w = (rng.standard_normal((o, c // group, 3, 3)) * 0.3).astype(np.float32)
    if coarse:  # one large element per output channel: a coarse INT8 grid
        w[:, 0, 0, 0] = 8.0
    b = (rng.standard_normal(o) * 0.1).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=list(pads),
                            group=group, strides=[stride, stride], dilations=[dilation] * 2)
    return make_model([node], [helper.make_tensor_value_info("x", F, ["B", c, hw, hw])],
                      [helper.make_tensor_value_info("y", F, ["B", o, "H", "W"])],
                      [init("w", w), init("b", b)])


def gemm(rng, *, k=48, n=12, trans_b=1, coarse=False):
    w = (rng.standard_normal((n, k) if trans_b else (k, n)) * 0.2).astype(np.float32)
    if coarse:
        w[:, 0] = 6.0
    node = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=trans_b)
    return make_model([node], [helper.make_tensor_value_info("x", F, ["B", k])],
                      [helper.make_tensor_value_info("y", F, ["B", n])], [init("w", w)])


def correlated(rng, shape, channel_axis=1, rank=2, n=6):
    """``n`` batches of inputs whose channels are strongly correlated (the same few latent
    factors in every batch): where rounding errors can be compensated across columns."""
    mix = rng.standard_normal((rank, shape[channel_axis]))
    return [{"x": _mixed(rng, shape, channel_axis, rank, mix)} for _ in range(n)]


def _mixed(rng, shape, channel_axis, rank, mix):
    lat_shape = list(shape)
    lat_shape[channel_axis] = rank
    lat = rng.standard_normal(lat_shape)
    x = np.moveaxis(np.tensordot(np.moveaxis(lat, channel_axis, -1), mix, 1), -1, channel_axis)
    return (x + 0.05 * rng.standard_normal(shape)).astype(np.float32)


def _weight(model, name="w"):
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


@pytest.mark.parametrize("case", ["conv", "depthwise", "strided_dilated", "gemm", "gemm_kn"])
def test_hessian_equals_the_layers_own_output_energy(case):
    """tr(W H W^T) = ||conv(x, W)||^2 for any W: the patches match ONNX Runtime's Conv
    (pads, strides, dilations, groups)."""
    rng = np.random.default_rng(0)
    kw = {"conv": {}, "depthwise": {"c": 6, "o": 6, "group": 6},
          "strided_dilated": {"stride": 2, "dilation": 2, "pads": (2, 1, 0, 2)},
          "gemm": {}, "gemm_kn": {"trans_b": 0}}[case]
    model = gemm(rng, **kw) if case.startswith("gemm") else conv(rng, **kw)
    for t in model.graph.initializer:
        if t.name == "b":
            t.CopyFrom(init("b", np.zeros_like(numpy_helper.to_array(t))))
    x = rng.standard_normal((3, 48) if case.startswith("gemm") else (3, 6, 9, 9)
                            ).astype(np.float32)
    (layer,), skipped = rounding_layers(model, ["conv", "fc"])
    assert not skipped
    h = input_hessians(model, [{"x": x[:2]}, {"x": x[2:]}], [layer])[layer.node].h
    from quantkit.ptq.weight_rounding import _grouped
    wg = _grouped(layer, _weight(model))
    energy = float(np.einsum("grk,gkl,grl->", wg, h, wg))
    y = run(model, [{"x": x}]).astype(np.float64)
    assert energy == pytest.approx(float((y ** 2).sum()), rel=1e-4)
    assert np.allclose(h, accumulate_hessian(layer, None, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["conv", "depthwise", "gemm"])
def test_gptq_rounding_lowers_int8_output_error_on_unseen_inputs(case):
    """Must help: the same INT8 plan, weights rounded by GPTQ from calibration inputs,
    beats round-to-nearest on held-out inputs of the same distribution (real Q/DQ graph)."""
    rng = np.random.default_rng(1)
    if case == "gemm":
        model = gemm(rng, coarse=True)
        data = correlated(rng, (64, 48))
    else:
        model = conv(rng, coarse=True,
                     **({"c": 6, "o": 6, "group": 6} if case == "depthwise" else {}))
        data = correlated(rng, (8, 6, 9, 9), rank=2)
        if case == "depthwise":  # one channel per output: correlation must be spatial
            data = [{"x": np.repeat(np.repeat(rng.standard_normal((8, 6, 3, 3)), 3, 2), 3, 3
                                    ).astype(np.float32)} for _ in range(6)]
    calib, held_out = data[:4], data[4:]
    plan, _ = calibrated_plan(model, data)
    ref, nearest, _ = int8_outputs(model, held_out, plan=plan, int8_weights=True)
    rounded, rec = refined_model(model, plan, calib, Recipe(weight_rounding="gptq"))
    assert [r.name for r in rec] == ["weight_rounding"] and rec[0].changes
    _, after, _ = int8_outputs(rounded, held_out, plan=plan, int8_weights=True)
    assert nmse(ref, after) < 0.9 * nmse(ref, nearest)


def test_rounded_weights_stay_on_the_original_int8_grid():
    """Each channel keeps its scale (amax / 127 of the original weight), int8 values in
    [-127, 127], one element at +-127; insert_qdq stores exactly those int8 values."""
    rng = np.random.default_rng(2)
    model = conv(rng, c=8, o=16)
    data = correlated(rng, (8, 8, 9, 9), n=3)
    plan, _ = calibrated_plan(model, data)
    layers, _ = rounding_layers(model, plan.int8_nodes())
    out, rec = round_weights(model, layers, input_hessians(model, data, layers))
    w0, w1 = _weight(model), _weight(out)
    s = int8_scale(weight_amax_per_channel(w0, 0)).reshape(-1, 1, 1, 1)
    q = w1 / s
    assert np.allclose(q, np.rint(q), atol=1e-3)
    assert np.all(np.abs(np.rint(q)) <= 127)
    assert np.all(np.abs(np.rint(q)).reshape(16, -1).max(axis=1) == 127)
    assert not np.allclose(w1, np.clip(np.rint(w0 / s), -127, 127) * s)  # not just nearest
    qdq, _ = insert_qdq(out, plan, target="tensorrt", int8_weights=True)
    int8 = [numpy_helper.to_array(t) for t in qdq.graph.initializer
            if t.data_type == 3 and tuple(t.dims) == w0.shape]
    assert len(int8) == 1 and np.array_equal(int8[0].astype(np.float32), np.rint(q))
    # the bias and every node outside the plan are untouched
    assert np.array_equal(_weight(out, "b"), _weight(model, "b"))


def test_gptq_round_is_nearest_when_inputs_are_uncorrelated():
    """A diagonal H decouples the columns: nothing to compensate, GPTQ = nearest (except
    the anchor element, which nearest also puts at +-127)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1, 5, 20))
    s = np.abs(w).max(axis=2) / 127
    h = np.diag(rng.random(20) + 0.5)[None]
    q = gptq_round(w, h, s, damp=0.0)
    assert np.array_equal(q, np.clip(np.rint(w / s[:, :, None]), -127, 127))


@pytest.mark.parametrize("case", ["gemm", "conv"])
def test_fp8_grid_rounding_keeps_the_per_tensor_scale_and_lowers_output_error(case):
    """grid="fp8": every rounded weight is an FP8 E4M3 value times the original per-tensor
    scale (amax / 448), the tensor's amax element stays at +-448 so the FP8 Q/DQ writer
    recomputes the same scale and stores exactly these codes, and the layer's output error
    on held-out inputs of the calibration distribution is below round-to-nearest's."""
    from quantkit.precision.plan import Precision
    from quantkit.qdq.fp8 import fake_quantize_fp8, fp8_scale, quantize_fp8
    from quantkit.qdq.casts import to_opset

    rng = np.random.default_rng(7)
    if case == "gemm":
        model, data = gemm(rng, k=64, n=16), correlated(rng, (64, 64), rank=3, n=8)
    else:
        model, data = conv(rng, c=8, o=16), correlated(rng, (8, 8, 9, 9), n=8)
    calib, held_out = data[:4], data[4:]
    layers, _ = rounding_layers(model, ["fc", "conv"])
    out, rec = round_weights(model, layers, input_hessians(model, calib, layers), grid="fp8")
    assert rec.params["grid"] == "fp8" and rec.changes
    w0, w1 = _weight(model), _weight(out)
    s = fp8_scale(float(np.abs(w0).max()))
    assert fp8_scale(float(np.abs(w1).max())) == s  # the amax element is pinned
    assert np.array_equal(fake_quantize_fp8(w1, s), w1)  # on the grid, nothing to round
    assert not np.array_equal(w1, fake_quantize_fp8(w0, s))  # not just nearest
    near = model.__class__()
    near.CopyFrom(model)
    for t in near.graph.initializer:
        if t.name == "w":
            t.CopyFrom(init("w", fake_quantize_fp8(w0, s)))
    ref = run(model, held_out)
    assert nmse(ref, run(out, held_out)) < 0.9 * nmse(ref, run(near, held_out))
    # the FP8 writer stores the rounded codes as they are
    plan, _ = calibrated_plan(model, data)
    plan = plan.with_precision(plan.int8_nodes(), Precision.FP8, "test")
    qdq, _ = insert_qdq(to_opset(out, 19, why="test"), plan, target="tensorrt",
                        int8_weights=True)
    codes = [numpy_helper.to_array(t) for t in qdq.graph.initializer
             if t.data_type == 17 and tuple(t.dims) == w0.shape]
    assert len(codes) == 1
    assert np.array_equal(codes[0].view(np.uint8), quantize_fp8(w1, s).view(np.uint8))


def test_gptq_round_rejects_an_unknown_grid():
    with pytest.raises(ValueError, match="grid 'int4'"):
        gptq_round(np.ones((1, 1, 2)), np.eye(2)[None], np.ones((1, 1)), grid="int4")


def test_unsupported_layers_are_skipped_with_a_reason():
    rng = np.random.default_rng(4)
    m = conv(rng)
    m.graph.node[0].attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
    del m.graph.node[0].attribute[[a.name for a in m.graph.node[0].attribute].index("pads")]
    layers, skipped = rounding_layers(m, ["conv"])
    assert not layers and "auto_pad=SAME_UPPER" in skipped["conv"]


def two_convs(rng, c=3, o=8):
    """x -> Conv 3x3 -> Relu -> Conv 1x1: the second conv reads a quantized activation."""
    w1 = (rng.standard_normal((o, c, 3, 3)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((o, o, 1, 1)) * 0.3).astype(np.float32)
    w2[:, 0] = 4.0  # coarse grid
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="c2")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["B", c, 9, 9])],
                      [helper.make_tensor_value_info("y", F, ["B", o, 9, 9])],
                      [init("w1", w1), init("b1", np.zeros(o, np.float32)), init("w2", w2)])


def test_activation_aware_rounding_targets_the_fp32_output_of_the_int8_network():
    """Inputs whose channels are one gray image under three affine maps (an RGB-normalized
    grayscale photo): FP32-input GPTQ trades rounding error along directions the input
    never takes, which input quantization then excites. The activation-aware rounding
    (statistics of each node's input as the INT8 network computes it, bias included) beats
    round-to-nearest and plain GPTQ on held-out inputs, on the real Q/DQ graph."""
    rng = np.random.default_rng(5)
    model = two_convs(rng)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

    def batch():
        g = np.repeat(np.repeat(rng.random((16, 1, 3, 3)), 3, 2), 3, 3)
        return {"x": ((g - mean[None, :, None, None]) / std[None, :, None, None]
                      ).astype(np.float32)}
    data = [batch() for _ in range(6)]
    calib, held_out = data[:4], data[4:]
    plan, _ = calibrated_plan(model, data)
    ref, nearest, _ = int8_outputs(model, held_out, plan=plan, int8_weights=True)
    err = {"nearest": nmse(ref, nearest)}
    for method in ("gptq", "gptq_aware"):
        rounded, rec = refined_model(model, plan, calib, Recipe(weight_rounding=method))
        assert rec[0].params["activation_aware"] == (method == "gptq_aware")
        err[method] = nmse(ref, int8_outputs(rounded, held_out, plan=plan,
                                             int8_weights=True)[1])
    assert err["gptq_aware"] < 0.9 * err["nearest"], err
    assert err["gptq_aware"] < err["gptq"], err


@pytest.mark.parametrize("group", [8, 2])
def test_grouped_statistics_in_blocks_of_groups_are_the_one_block_sums(monkeypatch, group):
    """A grouped conv's statistics go in blocks of groups (bounded arrays); every sum is
    bit-identical to the one block of all groups, with and without an input Q/DQ and a
    quantized input."""
    import quantkit.ptq.weight_rounding as wr

    rng = np.random.default_rng(0)
    layer = wr.RoundingLayer("n", "x", "w", "conv", group=group, kernel=(3, 3),
                             pads=(1, 1, 1, 1), strides=(2, 2), dilations=(1, 1))
    x = rng.standard_normal((3, 8, 10, 10)).astype(np.float32)
    xq = x + np.float32(0.01) * rng.standard_normal(x.shape).astype(np.float32)

    def stats(**kw):
        st = wr.InputStats()
        wr.accumulate(layer, st, x, **kw)
        wr.accumulate(layer, st, x[:2], **{k: (v[:2] if k == "quantized_input" else v)
                                           for k, v in kw.items()})
        return st

    for kw in ({}, {"step": 0.05}, {"step": 0.05, "quantized_input": xq}):
        whole = stats(**kw)
        monkeypatch.setattr(wr, "_BLOCK_ELEMENTS", 1)  # one group per block
        assert len(list(wr._group_blocks(layer, x))) == group
        blocks = stats(**kw)
        monkeypatch.undo()
        assert blocks.rows == whole.rows
        for f in ("h", "cross", "total", "total_q"):
            a, b = getattr(whole, f), getattr(blocks, f)
            assert (a is None) == (b is None), f
            if a is not None:
                np.testing.assert_array_equal(a, b, err_msg=f)


@pytest.mark.parametrize("shape", [(1, 24, 40), (6, 2, 9)])
def test_output_error_is_the_trace_of_dw_h_dw_t(shape):
    """The layer's squared output error ``tr(dW H dW^T)`` per group, summed: one batched GEMM
    gives the contraction written out (three-operand einsum) to float64 precision."""
    from quantkit.ptq.weight_rounding import _output_error

    rng = np.random.default_rng(3)
    g, r, k = shape
    dw = rng.standard_normal(shape)
    x = rng.standard_normal((g, k, 3 * k))
    h = x @ x.transpose(0, 2, 1)
    expected = sum(float(np.trace(dw[i] @ h[i] @ dw[i].T)) for i in range(g))
    assert _output_error(dw, h) == pytest.approx(expected, rel=1e-12)
    assert _output_error(dw, h) == pytest.approx(
        float(np.einsum("grk,gkl,grl->", dw, h, dw)), rel=1e-12)
