"""Stage artifacts: plan -> Q/DQ -> FP16 casts -> lint -> files, on the tiny world."""

from __future__ import annotations

import onnx

from quantkit.assets import sha256_file
from quantkit.run.artifact import build_artifact
from quantkit.run.plans import plan_for_ranges


def test_one_fp16_and_one_int8_artifact_per_calibrator(ctx, artifacts):
    assert list(artifacts) == ["fp16", "int8.minmax", "int8.percentile", "int8.entropy",
                               "int8.mse"]
    for name, art in artifacts.items():
        assert sha256_file(art.path) == art.sha256
        onnx.checker.check_model(onnx.load(art.path))
        assert (ctx.run_dir / "plans" / f"{name}.json").is_file()
        assert art.lint["violations"] == 0 and art.to_record()["artifact_sha256"] == art.sha256
    assert artifacts["fp16"].plan.int8_nodes() == []
    # fc2 has N=2 output features: a small GEMM, kept out of INT8 (TRT rule 10)
    assert artifacts["int8.mse"].plan.int8_nodes() == ["fc1"]
    ops = {n.op_type for n in onnx.load(artifacts["int8.mse"].path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Cast"} <= ops


def test_emulation_is_built_on_first_use(artifacts):
    """Built once, then parked on disk: later uses read the same graph back instead of
    keeping it in memory for the whole run."""
    em = artifacts["int8.minmax"].emulated
    assert em is not None
    first = em()
    assert em.spilled_ is not None and em.spilled_.path.exists()
    again = em()
    assert again is not first  # not held in memory ...
    assert again.SerializeToString() == first.SerializeToString()  # ... the same graph
    assert {n.op_type for n in again.graph.node} >= {"QuantizeLinear"}


def test_fp32_remainder_without_int8_is_the_fp32_graph(ctx, tmp_path):
    import dataclasses

    s = ctx.settings
    c = dataclasses.replace(ctx, settings=dataclasses.replace(
        s, precision=dataclasses.replace(s.precision, remainder="fp32")))
    art = build_artifact(c, "fp16", plan_for_ranges(c, None, None), out_dir=tmp_path)
    assert art.is_fp32_graph and art.emulated is None
    assert [n.op_type for n in onnx.load(art.path).graph.node] == \
        [n.op_type for n in ctx.graph.model.graph.node]


def test_fp16_scale_artifacts_are_selectable_and_linted(tiny, tmp_path):
    """precision.qdq_scale_dtype=fp16 (issue 17 item 14): opset-19 Q/DQ with float16 scales,
    no Cast -> QuantizeLinear pairs, lint-clean, and the same predictions as the default."""
    import numpy as np
    import onnx

    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.evaluation import evaluate_artifact
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.app import prepared_context
    from quantkit.run.scope import quant_scope
    from runworld import settings_for

    out = {}
    for dtype in ("fp32", "fp16"):
        ctx = prepared_context(settings_for(tiny, "stage_cache=false",
                                            f"precision.qdq_scale_dtype={dtype}"),
                               tmp_path / dtype)
        overflow = check_fp16_range(ctx)
        sources = apply_ptq(ctx, quant_scope(ctx), overflow, evaluate_reference(ctx))
        arts = build_artifacts(ctx, calibrate(ctx, sources), overflow, sources)
        art = arts["int8.minmax"]
        m = onnx.load(art.path)
        producers = {o: n for n in m.graph.node for o in n.output}
        casts_into_q = [n for n in m.graph.node if n.op_type == "QuantizeLinear"
                        and producers.get(n.input[0]) is not None
                        and producers[n.input[0]].op_type == "Cast"]
        opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
        out[dtype] = (len(casts_into_q), opset, art.lint["violations"],
                      evaluate_artifact(ctx, art, evaluate_reference(ctx)).logits)
    assert out["fp16"][0] == 0 and out["fp32"][0] > 0
    assert out["fp16"][1] >= 19 and out["fp16"][2] == 0
    assert np.array_equal(out["fp16"][3].argmax(1), out["fp32"][3].argmax(1))


def test_fp16_scales_need_an_fp16_remainder(tiny):
    import pytest

    from quantkit.errors import ConfigError
    from runworld import settings_for

    with pytest.raises(ConfigError, match="precision.qdq_scale_dtype"):
        settings_for(tiny, "precision.qdq_scale_dtype=fp16", "precision.remainder=fp32")
