"""Residual-stream scaling: the per-channel migration through residual Adds."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from ptq_graphs import F, init, int8_outputs, make_model, nmse, run
from quantkit.errors import ConfigError
from quantkit.ptq.capture import channel_stats
from quantkit.ptq.stream_scaling import find_streams, scale_streams, stream_tensors


def residual_stage(rng, c=8, *, extra_reader=None):
    """x -> Conv "proj0" (stream s0, two channels 10x the rest) -> block 1: Conv "expand1"
    -> Relu -> Conv "proj1" -> Add(s0, .) = s1 -> Conv "head" -> y: MobileNetV2's residual
    stage in small, the stream {s0, p1, s1} written by proj0 / proj1 and read by expand1 and
    head. ``extra_reader``: an op type that reads s1 too (then the stream cannot be scaled)."""
    gains = np.ones(c, np.float32)
    gains[[1, 5]] = 10.0
    w0 = (rng.standard_normal((c, 3, 3, 3)) * 0.3 * gains[:, None, None, None]).astype(np.float32)
    b0 = (rng.standard_normal(c) * 0.1 * gains).astype(np.float32)
    we = (rng.standard_normal((2 * c, c, 1, 1)) * 0.3).astype(np.float32)
    wp = (rng.standard_normal((c, 2 * c, 1, 1)) * 0.3 * gains[:, None, None, None]).astype(np.float32)
    wh = (rng.standard_normal((4, c, 1, 1)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["s0"], name="proj0", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["s0", "we"], ["e1"], name="expand1"),
             helper.make_node("Relu", ["e1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "wp"], ["p1"], name="proj1"),
             helper.make_node("Add", ["s0", "p1"], ["s1"], name="add1"),
             helper.make_node("Conv", ["s1", "wh"], ["y"], name="head")]
    outputs = [helper.make_tensor_value_info("y", F, ["B", 4, 6, 6])]
    if extra_reader:
        nodes.append(helper.make_node(extra_reader, ["s1"], ["z"], name="extra"))
        outputs.append(helper.make_tensor_value_info("z", F, ["B", 8, "H", "W"]))
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["B", 3, 6, 6])], outputs,
                      [init("w0", w0), init("b0", b0), init("we", we), init("wp", wp),
                       init("wh", wh)])


def _feeds(rng):
    return [{"x": rng.standard_normal((4, 3, 6, 6)).astype(np.float32)} for _ in range(3)]


def _absmax(model, feeds):
    return channel_stats(model, feeds, {t: 1 for t in stream_tensors(model)}).absmax


def test_finds_the_stream_with_its_writers_and_readers():
    model = residual_stage(np.random.default_rng(0))
    (s,) = find_streams(model)
    assert s.reason is None
    assert s.tensors == ("s0", "p1", "s1")
    assert s.writers == ("proj0", "proj1") and s.readers == ("expand1", "head")
    assert s.adds == ("add1",)


def test_fp32_function_unchanged_and_stream_flattened():
    rng = np.random.default_rng(1)
    model = residual_stage(rng)
    feeds = _feeds(rng)
    before = _absmax(model, feeds)
    scaled, rec = scale_streams(model, before, alpha=0.5)
    onnx.checker.check_model(scaled, full_check=True)
    assert list(rec.changes) == ["s1"] and not rec.skipped
    assert set(rec.groups[0]) == {"proj0", "proj1", "expand1", "head", "add1"}
    np.testing.assert_allclose(run(scaled, feeds), run(model, feeds), rtol=1e-4, atol=1e-4)
    after = _absmax(scaled, feeds)
    for t in ("s0", "p1", "s1"):
        ratio = lambda a: a.max() / np.median(a)  # noqa: E731
        assert ratio(after[t]) < 0.5 * ratio(before[t]), t


def test_scaling_reduces_the_int8_error():
    rng = np.random.default_rng(2)
    model = residual_stage(rng)
    feeds = _feeds(rng)
    ref, before, _ = int8_outputs(model, feeds)
    scaled, _ = scale_streams(model, _absmax(model, feeds), alpha=0.5)
    ref2, after, _ = int8_outputs(scaled, feeds)
    np.testing.assert_allclose(ref2, ref, rtol=1e-4, atol=1e-4)
    assert nmse(ref, after) < 0.7 * nmse(ref, before)


@pytest.mark.parametrize("op", ["Relu", "GlobalAveragePool"])
def test_a_stream_read_by_another_op_is_skipped_with_the_reason(op):
    rng = np.random.default_rng(3)
    model = residual_stage(rng, extra_reader=op)
    (s,) = find_streams(model)
    assert s.reason == f"s1 is read by {op} extra"
    assert stream_tensors(model) == []
    scaled, rec = scale_streams(model, {}, alpha=0.5)
    assert not rec.changes and rec.skipped == {"s1": f"s1 is read by {op} extra"}
    assert scaled.graph.initializer == model.graph.initializer


def test_bad_alpha_is_refused():
    model = residual_stage(np.random.default_rng(4))
    with pytest.raises(ConfigError, match="stream scaling alpha"):
        scale_streams(model, {}, alpha=1.5)
