"""FP8 E4M3 candidates in the run (issue 25): ``gpu.sm=90 precision.formats=[int8,fp8]`` gives
``fp8.<calibrator>`` beside ``int8.<calibrator>``, from the same calibration pass, written as
float8e4m3fn Q/DQ on the original graph, lint-clean and run on ONNX Runtime CPU."""

from __future__ import annotations

from quantkit.record.serde import encode
import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from runworld import settings_for


@pytest.fixture(scope="module")
def fp8_run(tiny, tmp_path_factory):
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.evaluation import evaluate_artifact
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.app import prepared_context
    from quantkit.run.scope import quant_scope
    from quantkit.run.stages.ptq import ptq as apply_ptq

    s = settings_for(tiny, "stage_cache=false", "gpu.sm=L4", "precision.formats=[int8,fp8]",
                     "calibrator.methods=[minmax,entropy,mse]")
    ctx = prepared_context(s, tmp_path_factory.mktemp("fp8-run"))
    overflow = check_fp16_range(ctx)
    sources = apply_ptq(ctx, quant_scope(ctx), overflow, evaluate_reference(ctx))
    source = sources.int8
    cal = calibrate(ctx, sources)
    arts = build_artifacts(ctx, cal, overflow, sources)
    ref = evaluate_reference(ctx)
    evals = {n: evaluate_artifact(ctx, a, ref) for n, a in arts.items()}
    return ctx, cal, arts, evals, source, ref


def test_fp8_candidates_beside_int8_from_one_pass(fp8_run):
    ctx, cal, arts, *_ = fp8_run
    assert sorted(arts) == ["fp16", "fp8.minmax", "fp8.mse", "int8.entropy", "int8.minmax",
                            "int8.mse"]
    # entropy has no FP8 form: said in the record, no silent INT8 stand-in
    assert "entropy" in cal.record.fp8.skipped
    # minmax does not depend on the grid; mse does (its own search on the FP8 grid)
    assert cal.of("fp8")["minmax"].amax == cal.ranges["minmax"].amax
    fp8_mse, int8_mse = cal.of("fp8")["mse"].amax, cal.ranges["mse"].amax
    top = cal.ranges["minmax"].amax
    assert fp8_mse.keys() == int8_mse.keys() and fp8_mse != int8_mse
    assert all(0 < fp8_mse[t] <= top[t] for t in top)
    assert (ctx.run_dir / "ranges" / "fp8.mse.json").is_file()


def test_an_fp8_artifact_is_float8_qdq_at_opset_19_on_the_original_graph(fp8_run):
    ctx, _, arts, *_ = fp8_run
    a = arts["fp8.mse"]
    m = onnx.load(a.path)
    assert max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) >= 19
    qdq = [n for n in m.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    inits = {t.name: t for t in m.graph.initializer}
    zero_points = [inits[n.input[2]] for n in qdq if len(n.input) > 2 and n.input[2] in inits]
    assert zero_points and all(z.data_type == TensorProto.FLOAT8E4M3FN for z in zero_points)
    assert a.plan.nodes_with("fp8") and not a.plan.int8_nodes()
    assert a.lint["violations"] == 0
    # no INT8 ptq step (FP8 is planned on the model's own FP32 function); only its weights'
    # rounding on the FP8 grid, chosen on dev (test_fp8_weights_*)
    assert [r.name for r in a.steps] == ["weight_rounding"]
    assert a.steps[0].params["grid"] == "fp8"
    # the FP8 weights are float8e4m3fn initializers whose values dequantize near FP32's
    w8 = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT8E4M3FN and t.dims]
    assert w8


def test_fp8_candidates_evaluate_on_ort_and_join_the_family(fp8_run):
    from quantkit.run.stages.signoff import family_members

    ctx, _, arts, evals, *_ = fp8_run
    for name in ("fp8.minmax", "fp8.mse"):
        ev = evals[name]
        assert ev.test is not None and np.isfinite(ev.test.point)
    members = family_members(ctx, evals, None)
    assert members[0] == "fp16"
    assert sum(m.startswith("int8.") for m in members) == 1
    assert sum(m.startswith("fp8.") for m in members) == 1


def test_fp8_on_ort_cpu_target_is_refused_in_settings(tiny):
    from quantkit.errors import ConfigError

    with pytest.raises(ConfigError, match="TensorRT only"):
        settings_for(tiny, "gpu.sm=90", "precision.formats=[int8,fp8]", "target=ort_cpu")
    # fp8 asked for, but only entropy (no FP8 form): refused before any work, not run as INT8
    with pytest.raises(ConfigError, match="no calibrator .* has an FP8 form"):
        settings_for(tiny, "gpu.sm=90", "precision.formats=[fp8]",
                     "calibrator.methods=[entropy]")


def arts_int8(fp8_run) -> list[str]:
    return fp8_run[2]["int8.mse"].plan.int8_nodes()


def _fill(fp8_run, powered):
    from quantkit.run.format_fill import fp8_fill

    ctx, _, arts, evals, source, ref = fp8_run
    base = arts["int8.mse"]
    kept = base.plan.int8_nodes()[-1:]  # the last MatMul, as if the search had kept it
    plan = base.plan.with_precision(kept, "fp16", "kept FP16 by search: test")
    return fp8_fill(ctx, base, plan, kept, arts, evals, ref, source, arts["fp16"].plan,
                    powered=powered), kept


def test_the_format_fill_puts_a_kept_layer_in_fp8_with_its_own_range(fp8_run):
    """On an FP8 GPU whose cost model finds FP8 faster (L4: FP8 = 2x FP16), the layer the
    search kept goes to FP8 when the plan stays powered on dev; the INT8 layers keep
    INT8's amax, the FP8 layer reads its own (Plan.fp8_amax), and the file is lint-clean
    float8 Q/DQ that ONNX Runtime runs."""
    from quantkit.precision.fp16_search import EvalResult

    fill, kept = _fill(fp8_run, lambda ev: EvalResult("PASS", 0.0, (0.0, 0.0)))
    assert fill.record.ran and fill.record.status == "PASS"
    assert list(fill.fp8_layers) == kept
    plan = fill.artifact.plan
    assert plan.nodes_with("fp8") == kept
    assert plan.int8_nodes() == [n for n in arts_int8(fp8_run) if n not in kept]
    # the FP8 layer's input range: measured on the FP8 grid on the variant's own graph
    assert plan.fp8_amax and all(v > 0 for v in plan.fp8_amax.values())
    assert fill.artifact.lint["violations"] == 0
    m = onnx.load(fill.artifact.path)
    zps = {t.data_type for t in m.graph.initializer if not t.dims}
    assert TensorProto.FLOAT8E4M3FN in zps
    assert np.isfinite(fill.evaluation.test.point)
    est = encode(fill.record.estimates[kept[0]])
    assert est["fp8_ms"] < est["fp16_ms"] and est["label"].startswith("estimated on L4")


def test_an_unpowered_fill_leaves_the_fp16_layers_and_says_why(fp8_run):
    from quantkit.precision.fp16_search import EvalResult

    fill, kept = _fill(fp8_run, lambda ev: EvalResult("INCONCLUSIVE", 0.0, (0.0, 0.0)))
    assert fill.artifact is None and fill.record.status == "INCONCLUSIVE"
    assert "FP16 ones stand" in fill.record.why


def _fp8_weights(artifact) -> dict[str, np.ndarray]:
    """FP8 weight initializers of an artifact, by the node that reads them (through its DQ)."""
    m = onnx.load(artifact.path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer
             if i.data_type == TensorProto.FLOAT8E4M3FN and i.dims}
    dq = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "DequantizeLinear"}
    return {n.name: inits[dq[i]] for n in m.graph.node for i in n.input
            if i in dq and dq[i] in inits}


def test_fp8_weights_are_gptq_rounded_where_dev_scores_it_lower_and_nearest_on_request(
        fp8_run, tiny, tmp_path):
    """``precision.fp8_weight_rounding=auto``: both full-FP8 candidates are scored on all of
    dev, the rounding is kept only when it scores lower, both scores are recorded; the
    FP8 codes of a node it changed differ from round-to-nearest's. ``nearest``: no step, the
    codes are the original weights' nearest FP8 values."""
    from quantkit.qdq.fp8 import fp8_scale, quantize_fp8
    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.app import prepared_context
    from quantkit.run.scope import quant_scope
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference

    ctx, _, arts, *_ = fp8_run
    step = arts["fp8.mse"].steps[0]
    scores = step.params["dev_scores"]
    assert step.params["chosen_by"] == "dev" and scores["examples"] == len(ctx.splits.dev)
    assert bool(step.changes) == (scores["gptq"] < scores["nearest"])
    assert all(a.steps == (step,) for n, a in arts.items() if n.startswith("fp8."))

    s = settings_for(tiny, "stage_cache=false", "gpu.sm=L4", "precision.formats=[int8,fp8]",
                     "calibrator.methods=[minmax,entropy,mse]",
                     "precision.fp8_weight_rounding=nearest")
    c = prepared_context(s, tmp_path)
    overflow = check_fp16_range(c)
    ref = evaluate_reference(c)
    sources = apply_ptq(c, quant_scope(c), overflow, ref)
    near = build_artifacts(c, calibrate(c, sources), overflow, sources)["fp8.mse"]
    assert near.steps == () and near.plan == arts["fp8.mse"].plan
    originals = {i.name: numpy_helper.to_array(i) for i in c.graph.model.graph.initializer}
    weights = {n.name: originals[n.input[1]] for n in c.graph.model.graph.node
               if n.name in near.plan.nodes_with("fp8") and n.input[1] in originals}
    got_near, got_auto = _fp8_weights(near), _fp8_weights(arts["fp8.mse"])
    assert set(got_near) == set(weights) and set(got_auto) == set(weights)
    for name, w in weights.items():
        nearest = quantize_fp8(w, fp8_scale(float(np.abs(w).max())))
        assert np.array_equal(got_near[name].view(np.uint8), nearest.view(np.uint8))
        same = np.array_equal(got_auto[name].view(np.uint8), nearest.view(np.uint8))
        assert same == (name not in step.changes), name


def test_an_unknown_fp8_weight_rounding_is_refused_in_settings(tiny):
    from quantkit.errors import ConfigError

    with pytest.raises(ConfigError, match="fp8_weight_rounding") as e:
        settings_for(tiny, "gpu.sm=90", "precision.formats=[int8,fp8]",
                     "precision.fp8_weight_rounding=gptq_aware")
    assert "gptq_aware" in str(e.value)
