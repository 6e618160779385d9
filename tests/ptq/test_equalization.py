"""Cross-layer equalization: Conv pairs with Relu / ReLU6 between."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ptq_graphs import F, init, int8_outputs, make_model, nmse, run
from quantkit.errors import ConfigError
from quantkit.ptq.equalization import equalize_pairs, find_pairs


def block(rng, act="relu", c=8):
    """pointwise 1x1 conv (channel gains 0.01..10) -> act -> depthwise 3x3 (compensating)
    -> act -> pointwise 1x1 projection: a MobileNetV2 inverted residual without the skip."""
    gains = np.geomspace(0.01, 10.0, c).astype(np.float32)
    w1 = (rng.standard_normal((c, 4, 1, 1)) * gains[:, None, None, None]).astype(np.float32)
    b1 = (rng.standard_normal(c) * gains * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((c, 1, 3, 3)) / gains[:, None, None, None]).astype(np.float32)
    b2 = (rng.standard_normal(c) * 0.1).astype(np.float32)
    w3 = rng.standard_normal((6, c, 1, 1)).astype(np.float32) * 0.3
    nodes, inits = [], [init("w1", w1), init("b1", b1), init("w2", w2), init("b2", b2),
                        init("w3", w3)]

    def activation(x, y, name):
        if act == "relu":
            return helper.make_node("Relu", [x], [y], name=name)
        return helper.make_node("Clip", [x, "lo", "hi"], [y], name=name)

    if act == "relu6":
        inits += [init("lo", np.array(0.0, np.float32)), init("hi", np.array(6.0, np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="expand"),
             activation("c1", "a1", "act1"),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="dw", group=c,
                              pads=[1, 1, 1, 1]),
             activation("c2", "a2", "act2"),
             helper.make_node("Conv", ["a2", "w3"], ["y"], name="project")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["B", 4, 8, 8])],
                      [helper.make_tensor_value_info("y", F, ["B", 6, 8, 8])], inits)


def _feeds(rng):
    return [{"x": rng.standard_normal((4, 4, 8, 8)).astype(np.float32) * 0.5} for _ in range(3)]


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_fp32_function_unchanged(act):
    rng = np.random.default_rng(0)
    model = block(rng, act)
    feeds = _feeds(rng)
    eq, rec = equalize_pairs(model)
    onnx.checker.check_model(eq, full_check=True)
    assert len(rec.changes) == 2 and not rec.skipped
    np.testing.assert_allclose(run(eq, feeds), run(model, feeds), rtol=1e-4, atol=1e-5)
    if act == "relu6":
        ops = [n.op_type for n in eq.graph.node]
        assert "Clip" not in ops and ops.count("Min") == 2


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_equalization_reduces_int8_error(act):
    rng = np.random.default_rng(1)
    model = block(rng, act)
    feeds = _feeds(rng)
    ref, before, _ = int8_outputs(model, feeds)
    eq, _ = equalize_pairs(model)
    ref2, after, _ = int8_outputs(eq, feeds)
    np.testing.assert_allclose(ref2, ref, rtol=1e-4, atol=1e-5)
    assert nmse(ref, after) < 0.5 * nmse(ref, before)


def test_relu6_skip_mode_and_bad_settings():
    rng = np.random.default_rng(2)
    model = block(rng, "relu6")
    assert [p[3] for p in find_pairs(model)] == ["relu6", "relu6"]
    eq, rec = equalize_pairs(model, relu6="skip")
    assert not rec.changes and len(rec.skipped) == 2
    assert [n.op_type for n in eq.graph.node] == [n.op_type for n in model.graph.node]
    with pytest.raises(ConfigError, match="relu6"):
        equalize_pairs(model, relu6="drop")


@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_activation_aware_scales_keep_fp32_and_help(act):
    from quantkit.ptq.capture import channel_stats
    from quantkit.ptq.equalization import pair_inputs

    rng = np.random.default_rng(3)
    model = block(rng, act)
    feeds = _feeds(rng)
    stats = channel_stats(model, feeds, {t: 1 for t in pair_inputs(model)})
    eq, rec = equalize_pairs(model, activation_absmax=stats.absmax, alpha=0.5)
    assert rec.params["activation_aware"] and len(rec.changes) == 2
    np.testing.assert_allclose(run(eq, feeds), run(model, feeds), rtol=1e-4, atol=1e-5)
    ref, before, _ = int8_outputs(model, feeds)
    _, after, _ = int8_outputs(eq, feeds)
    assert nmse(ref, after) < 0.5 * nmse(ref, before)
