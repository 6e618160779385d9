"""Sequential weight rounding: each node's statistics from the network whose earlier nodes
are already INT8 (ptq/sequential.py), on real Q/DQ graphs run by ONNX Runtime."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from ptq_graphs import (F, calibrated_plan, init, int8_outputs, make_model, nmse,
                        refined_model, run)
from quantkit.errors import CalibrationError
from quantkit.settings.ptq_recipe import Recipe
from quantkit.ptq.sequential import prune_to, sequential_round
from quantkit.ptq.weight_rounding import (apply_rounding, rounded_biases, rounded_int8,
                                          rounding_layers)

MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def chain(rng, c=3, o=8):
    """x -> Conv 3x3 -> Relu -> Conv 1x1 -> Relu -> Conv 1x1: each conv reads the INT8
    output of the one before (coarse weight grids: one large element per channel)."""
    w1 = (rng.standard_normal((o, c, 3, 3)) * 0.4).astype(np.float32)
    w2 = (rng.standard_normal((o, o, 1, 1)) * 0.3).astype(np.float32)
    w3 = (rng.standard_normal((o, o, 1, 1)) * 0.3).astype(np.float32)
    w1[:, 0, 0, 0], w2[:, 0], w3[:, 0] = 3.0, 4.0, 4.0
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["h2"], name="c2"),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="c3")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["B", c, 9, 9])],
                      [helper.make_tensor_value_info("y", F, ["B", o, 9, 9])],
                      [init("w1", w1), init("b1", np.full(o, 0.1, np.float32)),
                       init("w2", w2), init("b2", np.zeros(o, np.float32)), init("w3", w3)])


def gray_batches(rng, n=8, b=16):
    """One gray image under three affine maps per sample (a normalized grayscale photo)."""
    out = []
    for _ in range(n):
        g = np.repeat(np.repeat(rng.random((b, 1, 3, 3)), 3, 2), 3, 3)
        out.append({"x": ((g - MEAN[None, :, None, None]) / STD[None, :, None, None]
                          ).astype(np.float32)})
    return out


def test_prune_to_computes_the_same_tensor_with_only_its_ancestors():
    model = chain(np.random.default_rng(0))
    feeds = gray_batches(np.random.default_rng(1), n=2)
    pruned = prune_to(model, ["r1"])
    assert [n.name for n in pruned.graph.node] == ["c1", "relu1"]
    assert {t.name for t in pruned.graph.initializer} == {"w1", "b1"}
    full = helper.make_tensor_value_info("r1", F, None)
    model.graph.output.append(full)
    np.testing.assert_array_equal(run(pruned, feeds, "r1"), run(model, feeds, "r1"))


def test_sequential_rounding_beats_one_pass_rounding_on_held_out_inputs():
    """Must help: a chain of INT8 convs whose activation ranges are clipped (as a percentile
    or the range search clips them), so each conv reads a biased INT8 input. Statistics
    from the partially quantized network (each conv corrects the INT8 convs before it, mean
    output included) beat GPTQ and the one-pass activation-aware rounding on held-out
    inputs, summed over six random chains."""
    err = dict.fromkeys(("nearest", "gptq", "gptq_aware", "gptq_sequential"), 0.0)
    for seed in range(3, 9):
        rng = np.random.default_rng(seed)
        model = chain(rng)
        data = gray_batches(rng)
        calib, held_out = data[:6], data[6:]
        plan, _ = calibrated_plan(model, calib)
        plan = dataclasses.replace(plan, activation_amax={
            t: a * (0.4 if t in ("r1", "r2") else 1.0) for t, a in plan.activation_amax.items()})
        ref, nearest, _ = int8_outputs(model, held_out, plan=plan, int8_weights=True)
        err["nearest"] += nmse(ref, nearest)
        for method in ("gptq", "gptq_aware", "gptq_sequential"):
            rounded, rec = refined_model(model, plan, calib, Recipe(weight_rounding=method))
            assert rec[0].params.get("sequential", False) == (method == "gptq_sequential")
            err[method] += nmse(ref, int8_outputs(rounded, held_out, plan=plan,
                                                  int8_weights=True)[1])
    assert err["gptq_sequential"] < 0.7 * err["nearest"], err
    assert err["gptq_sequential"] < 0.95 * err["gptq_aware"], err
    assert err["gptq_sequential"] < 0.7 * err["gptq"], err


def test_sequential_rounding_stays_on_the_grid_and_its_cache_form_rebuilds_it():
    """The rounded weights keep the original per-channel scale (int8 values in [-127, 127])
    and the cache's form (int8 values + changed biases) rebuilds the same graph."""
    rng = np.random.default_rng(7)
    model = chain(rng)
    calib = gray_batches(rng, n=4)
    plan, _ = calibrated_plan(model, calib)
    layers, skipped = rounding_layers(model, plan.int8_nodes())
    rounded, rec = sequential_round(model, plan, layers, lambda: calib, skipped=skipped)
    assert rec.changes and set(rec.changes) | set(rec.skipped) == {"c1", "c2", "c3"}, rec
    q = rounded_int8(model, rounded, list(rec.changes))
    b = rounded_biases(model, rounded, list(rec.changes))
    assert all(v.dtype == np.int8 and np.abs(v.astype(int)).max() == 127 for v in q.values())
    assert set(b) == set(rec.changes)  # the mean output each node missed, in its bias
    rebuilt = apply_rounding(model, q, b)
    np.testing.assert_array_equal(run(rebuilt, calib), run(rounded, calib))


def test_sequential_rounding_without_batches_is_one_clear_error():
    model = chain(np.random.default_rng(0))
    calib = gray_batches(np.random.default_rng(1), n=2)
    plan, _ = calibrated_plan(model, calib)
    layers, _ = rounding_layers(model, plan.int8_nodes())
    with pytest.raises(CalibrationError, match="no calibration batches"):
        sequential_round(model, plan, layers, lambda: [])


def test_a_pruned_prefix_that_reads_fewer_inputs_gets_only_those():
    """A text model whose first MatMul reads the token embedding only (not the attention
    mask): its pruned prefix takes ``input_ids`` alone, and the pass feeds it just that."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
    from tinyworld import embedding_model

    model = embedding_model()
    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(2, 20, (4, 7)).astype(np.int64),
              "attention_mask": np.ones((4, 7), np.int64)} for _ in range(3)]
    plan, _ = calibrated_plan(model, feeds, op_types=("MatMul",))
    assert set(plan.int8_nodes()) == {"fc1", "fc2"}
    layers, skipped = rounding_layers(model, plan.int8_nodes())
    assert "attention_mask" not in {i.name for i in prune_to(model, ["tok"]).graph.input}
    rounded, rec = sequential_round(model, plan, layers, lambda: feeds)
    assert set(rec.changes) | set(rec.skipped) >= {"fc1", "fc2"}
