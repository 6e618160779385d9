"""The ptq steps in run order (quantkit.ptq.pipeline) on a small transformer-like block."""

from __future__ import annotations

import numpy as np
import onnx

from ptq_graphs import calibrated_plan, ln_linear, nmse, run
from quantkit.calibrate import activation_tensors, collect_stats, select_tensors
from quantkit.backends.runners import calibration_runner
from quantkit.calibrate.calibrators import make_calibrator
from quantkit.calibrate.ranges import compute_ranges
from quantkit.ptq.pipeline import CalibData, refine, rewrite
from quantkit.settings.ptq_recipe import Recipe
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import lint_for_target


def _int8(model, feeds, recipe):
    data = CalibData(batches=lambda: feeds, subset=lambda: feeds[:2])
    rewritten = rewrite(model, recipe, data, output="y", logits=False)
    m = rewritten.model
    res = collect_stats(m, feeds, activation_tensors(select_tensors(m, op_types=("MatMul",))),
                        progress=False, runner_factory=calibration_runner)
    ranges = compute_ranges(res.stats, {k: make_calibrator(k) for k in ("minmax", "percentile")})
    plan, _ = calibrated_plan(m, feeds, method="percentile")
    refined = refine(m, plan, ranges, recipe, data)
    q, _ = insert_qdq(refined.model, refined.plan, int8_weights=recipe.int8_weights)
    return m, q, list(rewritten.steps) + list(refined.records), rewritten


def test_all_steps_on_beat_all_off_and_stay_lint_clean():
    rng = np.random.default_rng(0)
    model = ln_linear(rng)
    feeds = [{"x": rng.standard_normal((4, 8, 32)).astype(np.float32)} for _ in range(4)]
    ref = run(model, feeds)
    _, q_off, rec_off, _ = _int8(model, feeds, Recipe())
    on = Recipe(smoothquant_alpha=0.5, range_search=True, bias_correction=True)
    smoothed, q_on, rec_on, rewritten = _int8(model, feeds, on)
    assert rec_off == [] and [r.name for r in rec_on] == ["smoothquant", "range_search",
                                                          "bias_correction"]
    assert [p.step for p in rewritten.proofs] == ["smoothquant"] and rewritten.proofs[0].kept
    np.testing.assert_allclose(run(smoothed, feeds), ref, rtol=1e-4, atol=1e-4)
    assert nmse(ref, run(q_on, feeds)) < 0.5 * nmse(ref, run(q_off, feeds))
    assert lint_for_target(q_on, "tensorrt") == []
    onnx.checker.check_model(q_on, full_check=True)
