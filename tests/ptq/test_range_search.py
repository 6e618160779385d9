"""Range search: per-tensor amax chosen by the consuming layer's output error."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from onnx import helper

from ptq_graphs import F, calibrated_plan, init, int8_outputs, make_model, nmse
from quantkit.errors import CalibrationError, ConfigError
from quantkit.ptq.capture import capture_tensors
from quantkit.ptq.range_search import int8_inputs, search_ranges


def two_layer(rng, k=32, n=32):
    """x -> MatMul w1 -> (h) -> MatMul w2 -> y; an activation-activation MatMul reads h too."""
    w1 = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    w2 = (rng.standard_normal((n, 8)) / np.sqrt(n)).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
                       helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")],
                      [helper.make_tensor_value_info("x", F, ["B", k])],
                      [helper.make_tensor_value_info("y", F, ["B", 8])],
                      [init("w1", w1), init("w2", w2)])


def _heavy_tailed(rng, n, k=32):
    """Student-t (df 1.5): heavy tails, so the max-abs range wastes most of the INT8 grid."""
    return rng.standard_t(1.5, (n, k)).astype(np.float32)


def test_search_repairs_an_over_clipped_range_on_held_out_data():
    """A calibrator that clips a heavy-tailed input far too hard (as entropy does to BERT's
    outlier channels): the search picks a wider candidate, judged on the layer output."""
    rng = np.random.default_rng(0)
    model = two_layer(rng)
    calib = [{"x": _heavy_tailed(rng, 64)} for _ in range(4)]
    held_out = [{"x": _heavy_tailed(rng, 64)} for _ in range(4)]
    minmax, _ = calibrated_plan(model, calib, method="minmax")
    clipped = {t: 0.05 * a for t, a in minmax.activation_amax.items()}
    plan = dataclasses.replace(minmax, activation_amax=clipped)
    samples = capture_tensors(model, calib, list(int8_inputs(model, plan)))
    cands = {t: {"minmax": a} for t, a in minmax.activation_amax.items()}
    amax, rec = search_ranges(model, plan, samples, cands)
    assert amax["x"] > 2 * clipped["x"] and "x" in rec.changes
    ref, before, _ = int8_outputs(model, held_out, plan=plan)
    _, after, _ = int8_outputs(model, held_out, plan=dataclasses.replace(plan, activation_amax=amax))
    assert nmse(ref, after) < 0.5 * nmse(ref, before)


def test_search_clips_a_gaussian_below_its_max():
    """Thin but long tails (many Gaussian samples): the best INT8 clip is below max-abs."""
    rng = np.random.default_rng(3)
    model = two_layer(rng)
    calib = [{"x": rng.standard_normal((2048, 32)).astype(np.float32)} for _ in range(2)]
    plan, _ = calibrated_plan(model, calib, method="minmax")
    samples = capture_tensors(model, calib, list(int8_inputs(model, plan)))
    amax, rec = search_ranges(model, plan, samples, grid=24, min_fraction=0.3)
    assert amax["x"] < 0.95 * plan.activation_amax["x"]
    held_out = [{"x": rng.standard_normal((2048, 32)).astype(np.float32)}]
    ref, before, _ = int8_outputs(model, held_out, plan=plan)
    _, after, _ = int8_outputs(model, held_out, plan=dataclasses.replace(plan, activation_amax=amax))
    assert nmse(ref, after) < nmse(ref, before)


def test_search_keeps_a_range_that_is_already_best_and_needs_samples():
    rng = np.random.default_rng(1)
    model = two_layer(rng)
    calib = [{"x": rng.uniform(-1, 1, (64, 32)).astype(np.float32)}]  # uniform: max is best
    plan, _ = calibrated_plan(model, calib, method="minmax")
    samples = capture_tensors(model, calib, list(int8_inputs(model, plan)))
    amax, _ = search_ranges(model, plan, samples, grid=8)
    assert amax["x"] == pytest.approx(plan.activation_amax["x"], rel=0.15)
    with pytest.raises(CalibrationError, match="no captured samples"):
        search_ranges(model, plan, {"x": samples["x"]})


def test_widest_keeps_the_range_a_sensitive_reader_needs():
    """x feeds A (ignores channel 0, prefers a clip) and B (reads only channel 0, the
    outlier): "widest" gives x B's range, "sum" may clip B for A's benefit."""
    rng = np.random.default_rng(4)
    k = 32
    wa = (rng.standard_normal((k, 16)) / np.sqrt(k)).astype(np.float32)
    wa[0] = 0.0
    wb = np.zeros((k, 16), np.float32)
    wb[0] = rng.standard_normal(16).astype(np.float32) * 0.01
    model = make_model([helper.make_node("MatMul", ["x", "wa"], ["ya"], name="a"),
                        helper.make_node("MatMul", ["x", "wb"], ["yb"], name="b"),
                        helper.make_node("Add", ["ya", "yb"], ["y"], name="add")],
                       [helper.make_tensor_value_info("x", F, ["B", k])],
                       [helper.make_tensor_value_info("y", F, ["B", 16])],
                       [init("wa", wa), init("wb", wb)])
    x = rng.standard_normal((256, k)).astype(np.float32)
    x[:, 0] = rng.uniform(20, 40, 256)
    calib = [{"x": x}]
    plan, _ = calibrated_plan(model, calib, method="minmax")
    samples = capture_tensors(model, calib, ["x"])
    wide, rec = search_ranges(model, plan, samples, combine="widest")
    summed, _ = search_ranges(model, plan, samples, combine="sum")
    alone = [search_ranges(model, plan.with_precision(other, "fp32", "test"), samples)[0]["x"]
             for other in ("b", "a")]  # only a INT8, only b INT8
    assert alone[0] < 0.7 * alone[1]  # a alone clips, b alone keeps the outlier channel
    assert wide["x"] == max(alone) and summed["x"] <= wide["x"]
    assert wide["x"] > 0.9 * plan.activation_amax["x"]
    assert rec.params["combine"] == "widest"
    with pytest.raises(ConfigError, match="combine"):
        search_ranges(model, plan, samples, combine="mean")


def _massive_rows(rng, n, k=32, massive=2, scale=200.0):
    """Rows (tokens) of Gaussian values, ``massive`` of every ``n`` rows scaled by ``scale``
    (a transformer's massive-activation tokens): they hold nearly all the tensor's power."""
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[rng.choice(n, massive, replace=False)] *= scale
    return x


def _row_nmse(ref, out):
    ref, out = ref.astype(np.float64), out.astype(np.float64)
    return float(np.mean(np.mean((out - ref) ** 2, -1) / np.mean(ref ** 2, -1)))


def test_row_error_keeps_the_ordinary_rows_precise_where_tensor_error_sacrifices_them():
    """error='row' scores every output row by its own power: on held-out data its range
    gives a lower per-row error than error='tensor', whose range serves the massive rows."""
    rng = np.random.default_rng(5)
    model = two_layer(rng)
    calib = [{"x": _massive_rows(rng, 256)} for _ in range(2)]
    held_out = [{"x": _massive_rows(rng, 256)} for _ in range(2)]
    plan, _ = calibrated_plan(model, calib, method="minmax")
    samples = capture_tensors(model, calib, list(int8_inputs(model, plan)))
    kw = dict(grid=24, min_fraction=0.01)
    by_tensor, _ = search_ranges(model, plan, samples, error="tensor", **kw)
    by_row, rec = search_ranges(model, plan, samples, error="row", **kw)
    assert rec.params["error"] == "row" and by_row["x"] < by_tensor["x"]
    outs = {}
    for name, amax in (("tensor", by_tensor), ("row", by_row)):
        ref, outs[name], _ = int8_outputs(model, held_out,
                                          plan=dataclasses.replace(plan, activation_amax=amax))
    assert _row_nmse(ref, outs["row"]) < 0.5 * _row_nmse(ref, outs["tensor"])
    with pytest.raises(ConfigError, match="range_search_error"):
        search_ranges(model, plan, samples, error="token")


@pytest.mark.parametrize("error", ["tensor", "row"])
def test_a_prepared_target_scores_like_the_error_written_out(error):
    """The reference's float64 copy and power are computed once per batch (range_search
    ._Target); its error is the normalized squared error written out: over the tensor, or
    per row with each row's power floored at 1% of the mean row power."""
    from quantkit.ptq.range_search import _ROW_FLOOR, _Target

    rng = np.random.default_rng(11)
    ref = rng.standard_normal((3, 5, 16)).astype(np.float32)
    ref[0, 1] *= 1e-4  # a near-silent row: its power is floored
    out = ref + 0.01 * rng.standard_normal(ref.shape).astype(np.float32)
    r64, o64 = ref.astype(np.float64), out.astype(np.float64)
    if error == "tensor":
        expected = np.mean((o64 - r64) ** 2) / np.mean(r64 ** 2)
    else:
        power = np.mean(r64 ** 2, -1).reshape(-1)
        power = np.maximum(power, _ROW_FLOOR * power.mean())
        expected = np.mean(np.mean((o64 - r64) ** 2, -1).reshape(-1) / power)
    target = _Target.of(ref, error)
    assert target.nmse(out) == pytest.approx(expected, rel=1e-12)
    assert target.nmse(out) == target.nmse(out)  # the prepared target is not consumed


def test_plans_sharing_an_error_memo_search_as_they_do_alone():
    """The calibrators' plans of one graph score the same candidates: with one memo the
    second plan's search measures nothing new and chooses exactly what it chooses alone."""
    rng = np.random.default_rng(7)
    model = two_layer(rng)
    calib = [{"x": _heavy_tailed(rng, 64)} for _ in range(2)]
    minmax, _ = calibrated_plan(model, calib, method="minmax")
    clipped = dataclasses.replace(minmax, activation_amax={
        t: 0.3 * a for t, a in minmax.activation_amax.items()})
    samples = capture_tensors(model, calib, list(int8_inputs(model, minmax)))
    cands = {t: {"minmax": a, "clipped": 0.3 * a} for t, a in minmax.activation_amax.items()}
    alone = [search_ranges(model, p, samples, cands, grid=8) for p in (minmax, clipped)]
    memo: dict = {}
    first = search_ranges(model, minmax, samples, cands, grid=8, memo=memo)
    measured = dict(memo)
    second = search_ranges(model, clipped, samples, cands, grid=8, memo=memo)
    assert memo == measured and len(measured) >= 2 * 8  # two tensors, 8 clips each
    for (a, rec), (b, rec_b) in zip(alone, (first, second)):
        assert a == b and rec.changes == rec_b.changes
