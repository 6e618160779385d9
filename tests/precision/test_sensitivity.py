"""proxy_scores, measured_scores and rank: the formulas on hand-made numbers, and the
tensors of a real graph. The real ORT ranking of a fragile layer is in test_search.py."""


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.compare.metrics import LayerStats
from quantkit.errors import ConfigError, DataError
from quantkit.precision.plan import build_plan
from quantkit.precision.sensitivity import (MeasuredScores, int8_node_tensors, measured_scores,
                                            proxy_scores, rank)

F = TensorProto.FLOAT


def stats(sqnr_db, clipping_rate=None):
    return {"sqnr_db": sqnr_db, "clipping_rate": clipping_rate, "cosine": 1.0}


def test_proxy_is_the_noise_power_a_node_adds_plus_weighted_clipping():
    layer = {"x": stats(200.0), "h0": stats(30.0), "h1": stats(10.0, 0.02),
             "h2": stats(9.5)}
    outs = {"mm0": "h0", "mm1": "h1", "mm2": "h2"}
    ins = {"mm0": ["x"], "mm1": ["h0"], "mm2": ["h1"]}
    s = proxy_scores(layer, outs, ins)
    assert list(s) == ["mm0", "mm1", "mm2"]
    assert s["mm0"]["added_noise"] == pytest.approx(1e-3, rel=1e-9)
    assert s["mm0"]["score"] == pytest.approx(1e-3, rel=1e-9)
    assert s["mm1"]["added_noise"] == pytest.approx(0.1 - 1e-3)
    assert s["mm1"]["score"] == pytest.approx(0.1 - 1e-3)  # clipping of h1 counts for mm2
    assert s["mm2"]["added_noise"] == pytest.approx(10 ** -0.95 - 0.1)
    assert s["mm2"]["score"] == pytest.approx(10 ** -0.95 - 0.1 + 0.02)
    assert s["mm2"]["clipping_rate"] == 0.02
    assert s["mm1"]["drop_db"] == pytest.approx(20.0) and s["mm0"]["drop_db"] == 170.0
    assert rank(s) == ["mm1", "mm2", "mm0"]
    # clip_weight scales the clipping term only
    assert proxy_scores(layer, outs, ins, clip_weight=0.0)["mm2"]["score"] == \
        pytest.approx(10 ** -0.95 - 0.1)


def test_proxy_handles_missing_and_json_safe_values():
    layer = {"h0": stats(20.0), "a": stats(None), "b": stats(float("inf")), "h1": stats(15.0),
             "c": stats(25.0, 0.5), "d": stats(12.0), "h2": stats(11.0)}
    outs = {"mm0": "h0", "mm1": "h1", "mm2": "h2", "mm3": "h_missing"}
    ins = {"mm0": ["graph_in"], "mm1": ["a", "b"], "mm2": ["c", "d", "c"], "mm3": ["h0"]}
    s = proxy_scores(layer, outs, ins)
    assert s["mm0"]["inputs_missing"] == ["graph_in"] and s["mm0"]["noise_in"] == 0.0
    assert s["mm0"]["sqnr_in_db"] == 200.0 and s["mm0"]["added_noise"] == pytest.approx(0.01)
    assert s["mm1"]["inputs_missing"] == ["a"] and s["mm1"]["sqnr_in_db"] == 200.0
    # several inputs: the noisiest sets N_in, the largest clipping rate counts
    assert s["mm2"]["sqnr_in_db"] == 12.0 and s["mm2"]["clipping_rate"] == 0.5
    assert s["mm2"]["added_noise"] == pytest.approx(10 ** -1.1 - 10 ** -1.2)
    assert s["mm3"]["score"] is None and s["mm3"]["drop_db"] is None
    assert rank(s)[-1] == "mm3"
    with pytest.raises(ConfigError, match="clip_weight"):
        proxy_scores(layer, outs, ins, clip_weight=-1)


def test_proxy_from_real_layer_stats_results():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32))
    h_clean = x @ rng.standard_normal((32, 32))
    h_cand = h_clean + rng.standard_normal(h_clean.shape) * 0.1 * h_clean.std()
    layer = {"x": LayerStats().update(x, x, amax=1.0).result(),
             "h": LayerStats().update(h_clean, h_cand).result()}
    s = proxy_scores(layer, {"mm": "h"}, {"mm": ["x"]})["mm"]
    assert s["added_noise"] == pytest.approx(layer["h"]["relative_error"] ** 2, rel=1e-6)
    assert s["clipping_rate"] == pytest.approx(np.mean(np.abs(x) > 1.0))
    assert s["score"] == pytest.approx(s["added_noise"] + s["clipping_rate"])


WEIGHTS = {"a": 0.1, "b": 2.0, "c": 0.5, "d": 0.5}


def damage(fp16: frozenset) -> float:
    """Sum of the weights of INT8 nodes, plus an interaction when b and c are both INT8."""
    int8 = set(WEIGHTS) - set(fp16)
    return sum(WEIGHTS[n] for n in int8) + (1.0 if {"b", "c"} <= int8 else 0.0)


def test_measured_restore_and_only_modes_record_cost():
    nodes = list(WEIGHTS)
    calls = []

    def evaluate(fp16):
        calls.append(fp16)
        return damage(fp16)

    restore = measured_scores(evaluate, nodes)
    assert isinstance(restore, MeasuredScores) and restore.mode == "restore"
    assert restore.baseline == pytest.approx(4.1)
    assert dict(restore) == pytest.approx({"a": 0.1, "b": 3.0, "c": 1.5, "d": 0.5})
    assert calls == [frozenset(), *(frozenset({n}) for n in nodes)]
    assert restore.evaluations == 5 and restore.seconds >= 0
    assert [s["step"] for s in restore.steps] == ["baseline"] + ["node"] * 4
    assert restore.steps[2]["fp16_set"] == ["b"] and restore.steps[2]["node"] == "b"
    assert restore.cost()["evaluations"] == 5
    assert rank(restore) == ["b", "c", "d", "a"]

    calls.clear()
    only = measured_scores(evaluate, nodes, mode="only")
    assert only.baseline == 0.0
    assert dict(only) == pytest.approx({"a": 0.1, "b": 2.0, "c": 0.5, "d": 0.5})
    assert calls[0] == frozenset(nodes) and calls[1] == frozenset("bcd")
    assert rank(only) == ["b", "c", "d", "a"]  # c and d tie: node order


def test_measured_rejects_bad_input():
    with pytest.raises(ConfigError, match="mode"):
        measured_scores(damage, ["a"], mode="drop")
    with pytest.raises(ConfigError, match="lists a node twice"):
        measured_scores(damage, ["a", "a"])
    with pytest.raises(ConfigError, match="one string"):
        measured_scores(damage, "a")
    with pytest.raises(DataError, match="non-finite"):
        measured_scores(lambda s: float("nan"), ["a"])
    with pytest.raises(DataError, match="non-finite"):
        measured_scores(lambda s: None, ["a"])


def test_rank_is_deterministic_with_ties_none_and_order():
    scores = {"c": 1.0, "a": 2.0, "b": 1.0, "d": None, "e": float("nan"), "f": 1.0}
    assert rank(scores) == ["a", "c", "b", "f", "d", "e"]
    order = ["f", "e", "d", "c", "b", "a"]
    assert rank(scores, order=order) == ["a", "f", "c", "b", "e", "d"]
    # nodes missing from order come after the ordered ones, in scores order
    assert rank(scores, order=["b"]) == ["a", "b", "c", "f", "d", "e"]
    assert rank({"x": {"score": 0.5}, "y": {"score": 0.7}}) == ["y", "x"]
    assert rank({}) == []
    with pytest.raises(ConfigError, match="score"):
        rank({"x": "high"})


def test_int8_node_tensors_names_each_quantized_activation_input():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "W")
    wg = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "Wg")
    bg = numpy_helper.from_array(np.zeros(32, np.float32), "bg")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
             helper.make_node("MatMul", ["h", "k"], ["s"], name="scores"),
             helper.make_node("Gemm", ["s", "Wg", "bg"], ["y"], name="fc", transB=1),
             helper.make_node("Relu", ["y"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [32, 32]),
                                           helper.make_tensor_value_info("k", F, [32, 32])],
                              [helper.make_tensor_value_info("out", F, [32, 32])], [w, wg, bg])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    plan = build_plan(model, amax={"x": 1.0, "h": 1.0, "k": 1.0, "s": 1.0})
    assert plan.int8_nodes() == ["proj", "scores", "fc"]
    outs, ins = int8_node_tensors(model, reversed(plan.int8_nodes()))
    assert list(outs) == ["proj", "scores", "fc"]  # graph order
    assert outs == {"proj": "h", "scores": "s", "fc": "y"}
    assert ins == {"proj": ["x"], "scores": ["h", "k"], "fc": ["s"]}
    with pytest.raises(ConfigError, match="not in the model"):
        int8_node_tensors(model, ["nope"])
