"""select_tensors on graphs built in code; collect_stats through a real ORT session."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.calibrate import CALIBRATORS, make_calibrator
from quantkit.backends.runners import calibration_runner
from quantkit.calibrate.collect import (QuantTarget, WeightTarget, activation_tensors,
                                        collect_stats, compute_ranges, select_tensors)
from quantkit.calibrate.histogram import HistogramStats
from quantkit.errors import CalibrationError, ConfigError

RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((8, 16)).astype(np.float32)
B1 = RNG.standard_normal((4, 16)).astype(np.float32)
MASK = np.where(np.arange(16) % 5 == 0, -np.inf, 0.0).astype(np.float32)


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _select_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    const_w = helper.make_node("Constant", [], ["Wc"], name="wc",
                               value=numpy_helper.from_array(np.ones((16, 2), np.float32)))
    nodes = [
        helper.make_node("MatMul", ["X", "W0"], ["h0"], name="enc/fc0"),
        helper.make_node("Relu", ["h0"], ["h1"], name="relu"),
        helper.make_node("Gemm", ["h1", "B1", "C1"], ["h2"], name="enc/gemm", transB=1),
        helper.make_node("Transpose", ["h2"], ["h2t"], name="t"),
        helper.make_node("MatMul", ["h2", "h2t"], ["att"], name="attn/qk"),
        const_w,
        helper.make_node("MatMul", ["h1", "Wc"], ["hc"], name="head/const"),
        helper.make_node("MatMul", ["h1", "W2"], ["h3"]),  # unnamed
        helper.make_node("MatMul", ["h1", "v"], ["gemv"], name="gemv"),
    ]
    inits = [numpy_helper.from_array(W0, "W0"), numpy_helper.from_array(B1, "B1"),
             numpy_helper.from_array(np.zeros(4, np.float32), "C1"),
             numpy_helper.from_array(np.ones((16, 3), np.float32), "W2"),
             numpy_helper.from_array(np.ones(16, np.float32), "v")]
    outs = [helper.make_tensor_value_info(n, f, shape) for n, shape in
            (("att", ["N", "N"]), ("hc", ["N", 2]), ("h3", ["N", 3]), ("gemv", ["N"]))]
    return _model(nodes, [helper.make_tensor_value_info("X", f, ["N", 8])], outs, inits)


def _conv_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Conv", ["Xc", "Wk", "bk"], ["y"], name="conv0", pads=[1] * 4),
             helper.make_node("ConvTranspose", ["y", "Wt"], ["z"], name="deconv")]
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "Wk"),
             numpy_helper.from_array(np.zeros(4, np.float32), "bk"),
             numpy_helper.from_array(np.ones((4, 2, 2, 2), np.float32), "Wt")]
    return _model(nodes, [helper.make_tensor_value_info("Xc", f, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("z", f, [1, 2, 9, 9])], inits)


def test_select_tensors_finds_weighted_nodes_in_order():
    targets = select_tensors(_select_model())
    assert [t.node for t in targets] == ["enc/fc0", "enc/gemm", "attn/qk", "head/const",
                                         "MatMul_7"]
    by = {t.node: t for t in targets}
    assert by["enc/fc0"] == QuantTarget("enc/fc0", "MatMul", 0, ("X",),
                                        WeightTarget("W0", 1, 1, (8, 16), "initializer"))
    assert by["enc/gemm"].weight == WeightTarget("B1", 1, 0, (4, 16), "initializer")
    assert by["enc/gemm"].activations == ("h1",)
    assert by["attn/qk"].activations == ("h2", "h2t") and by["attn/qk"].weight is None
    assert by["head/const"].weight == WeightTarget("Wc", 1, 1, (16, 2), "Constant")
    assert by["MatMul_7"].node_index == 7
    assert activation_tensors(targets) == ["X", "h1", "h2", "h2t"]


def test_select_tensors_conv_and_regex_filters():
    conv = select_tensors(_conv_model())
    assert [(t.node, t.activations, t.weight.name, t.weight.axis) for t in conv] == [
        ("conv0", ("Xc",), "Wk", 0), ("deconv", ("y",), "Wt", 1)]
    m = _select_model()
    # patterns match the whole node name (re.fullmatch, quantkit.graph.selection)
    assert [t.node for t in select_tensors(m, include_nodes=[r"enc/.*"])] == ["enc/fc0",
                                                                              "enc/gemm"]
    assert [t.node for t in select_tensors(m, include_nodes="enc/.*", exclude_nodes=[".*gemm"])] \
        == ["enc/fc0"]
    assert select_tensors(m, include_nodes=["enc"]) == []  # no partial matches
    assert [t.node for t in select_tensors(m, op_types=("Gemm",))] == ["enc/gemm"]
    with pytest.raises(ConfigError, match="regular expression"):
        select_tensors(m, include_nodes=["("])


def _collect_model() -> onnx.ModelProto:
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("MatMul", ["X", "W0"], ["h0"], name="fc0"),
        helper.make_node("Relu", ["h0"], ["h1"], name="relu"),
        helper.make_node("Gemm", ["h1", "B1"], ["y"], name="fc1", transB=1),
        helper.make_node("Add", ["h0", "mask"], ["masked"], name="mask_add"),
        helper.make_node("Mul", ["h0", "zero"], ["zeroed"], name="zero_mul"),
    ]
    inits = [numpy_helper.from_array(W0, "W0"), numpy_helper.from_array(B1, "B1"),
             numpy_helper.from_array(MASK, "mask"),
             numpy_helper.from_array(np.zeros(16, np.float32), "zero")]
    outs = [helper.make_tensor_value_info(n, f, ["N", d]) for n, d in
            (("y", 4), ("masked", 16), ("zeroed", 16))]
    return _model(nodes, [helper.make_tensor_value_info("X", f, ["N", 8])], outs, inits)


def _batches(sizes=(5, 7, 3)):
    rng = np.random.default_rng(1)
    return [{"X": rng.standard_normal((n, 8)).astype(np.float32)} for n in sizes]


TENSORS = ["X", "h0", "h1", "masked", "zeroed"]


def test_collect_stats_matches_numpy_forward(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_collect_model(), path)
    batches = _batches()
    res = collect_stats(path, batches, TENSORS, num_bins=512, progress=False, runner_factory=calibration_runner)
    x = np.concatenate([b["X"] for b in batches])
    h0 = x @ W0
    assert res.samples_seen == 15 and res.batches_seen == 3 and res.seconds >= 0
    assert res.chunk_stats is None
    ref = HistogramStats(512).observe(x)  # graph input: taken from the feed
    np.testing.assert_array_equal(res.stats["X"].hist_, ref.hist_)
    assert (res.stats["X"].count_, res.stats["X"].amax_) == (ref.count_, ref.amax_)
    assert res.stats["h0"].amax_ == pytest.approx(np.abs(h0).max(), rel=1e-5)
    assert res.stats["h1"].amax_ == pytest.approx(np.maximum(h0, 0).max(), rel=1e-5)
    assert res.stats["h1"].n_zero_ == np.count_nonzero(h0 <= 0)
    assert res.stats["masked"].n_nonfinite_ == 15 * np.count_nonzero(np.isinf(MASK))
    assert res.stats["zeroed"].amax_ == 0.0 and res.stats["zeroed"].count_ == 15 * 16
    assert all(s.hist_.size == 512 for s in res.stats.values())


def test_compute_ranges_excludes_nonfinite_and_handles_all_zero():
    res = collect_stats(_collect_model(), _batches(), TENSORS, progress=False, runner_factory=calibration_runner)
    cals = {name: make_calibrator(name) for name in CALIBRATORS}
    ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen)
    assert set(ranges) == set(CALIBRATORS)
    n_bad = 15 * int(np.count_nonzero(np.isinf(MASK)))
    for name, r in ranges.items():
        assert r.calibrator == name == r.method and r.samples_seen == 15
        assert r.params == cals[name].get_params()
        assert r.excluded == {"masked": f"non-finite values (n={n_bad})"}
        assert "masked" not in r.amax and "all-zero" in r.notes["zeroed"]
        assert r.amax["zeroed"] == 1.0
        assert all(np.isfinite(a) and a > 0 for a in r.amax.values())
        assert r.amax["h0"] <= res.stats["h0"].amax_
        assert set(r.summary) == set(TENSORS)
        assert r.summary["h0"]["p99_99"] <= r.summary["h0"]["amax"]
        assert r.scale("h0") == pytest.approx(r.amax["h0"] / 127)
    assert ranges["minmax"].amax["h0"] == res.stats["h0"].amax_
    with pytest.raises(CalibrationError, match="excluded"):
        ranges["minmax"].scale("masked")


def test_collect_chunks_and_custom_runner():
    seen = []

    def factory(model, extra_outputs):
        seen.append(list(extra_outputs))
        return OrtRunner(model, extra_outputs=extra_outputs)

    batches = _batches((2, 3, 4, 5, 6))
    plain = collect_stats(_collect_model(), batches, ["h0", "h1"], progress=False, runner_factory=calibration_runner)
    chunked = collect_stats(_collect_model(), iter(batches), ["h0", "h1"], progress=False,
                            runner_factory=factory, num_chunks=3)
    assert seen == [["h0", "h1"]]
    assert len(chunked.chunk_stats) == 3
    assert [c["h0"].count_ for c in chunked.chunk_stats] == [16 * 7, 16 * 9, 16 * 4]
    for t in ("h0", "h1"):
        np.testing.assert_array_equal(chunked.stats[t].hist_, plain.stats[t].hist_)
    few = collect_stats(_collect_model(), batches[:1], ["h0"], progress=False, num_chunks=4, runner_factory=calibration_runner)
    assert len(few.chunk_stats) == 1


def test_collect_errors():
    m = _collect_model()
    with pytest.raises(CalibrationError, match="nope"):
        collect_stats(m, _batches(), ["h0", "nope"], progress=False, runner_factory=calibration_runner)
    with pytest.raises(CalibrationError, match="weight"):
        collect_stats(m, _batches(), ["W0"], progress=False, runner_factory=calibration_runner)
    with pytest.raises(CalibrationError, match="no calibration batches"):
        collect_stats(m, [], ["h0"], progress=False, runner_factory=calibration_runner)
    with pytest.raises(CalibrationError, match="batch 0"):
        collect_stats(m, [{"X": np.ones((2, 3), np.float32)}], ["h0"], progress=False, runner_factory=calibration_runner)
    with pytest.raises(CalibrationError, match="model file not found"):
        collect_stats("/nonexistent/model.onnx", _batches(), ["h0"], progress=False, runner_factory=calibration_runner)
    with pytest.raises(ConfigError):
        collect_stats(m, _batches(), ["h0"], progress=False, num_chunks=0, runner_factory=calibration_runner)


def test_bootstrap_from_collected_chunks():
    from quantkit.calibrate import bootstrap_ranges

    res = collect_stats(_collect_model(), _batches((3,) * 8), TENSORS, progress=False,
                        num_chunks=4, runner_factory=calibration_runner)
    cals = {name: make_calibrator(name) for name in CALIBRATORS}
    spread = bootstrap_ranges(res.chunk_stats, cals, num_resamples=5, seed=0)
    for per_tensor in spread.values():
        assert "masked" not in per_tensor
        assert per_tensor["zeroed"].std == 0.0 and per_tensor["zeroed"].amax == 1.0
        assert np.isfinite(per_tensor["h0"].rel_spread)


def test_mask_sentinel_tensor_is_excluded_without_overflow():
    """Attention masks exported by transformers 5 carry finfo(float32).min, not -inf."""
    import warnings

    from quantkit.calibrate import HistogramStats, compute_ranges, make_calibrator

    x = np.zeros((4, 16), dtype=np.float32)
    x[:, 10:] = np.finfo(np.float32).min
    s = HistogramStats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no float32 overflow in the running sums
        s.observe(x)
    r = compute_ranges({"mask": s}, {"minmax": make_calibrator("minmax")})["minmax"]
    assert "mask" not in r.amax and "sentinel" in r.excluded["mask"]
    assert np.isfinite(s.sumsq_) and np.isfinite(s.std)
