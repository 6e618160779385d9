"""Stage artifacts: plan -> Q/DQ -> FP16 casts -> lint -> files, on the tiny world."""

from __future__ import annotations

import onnx

from quantkit.assets import sha256_file
from quantkit.run import build_artifact, plan_for_ranges


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
    em = artifacts["int8.minmax"].emulated
    assert em is not None and em() is em()  # once
    assert {n.op_type for n in em().graph.node} >= {"QuantizeLinear"}


def test_fp32_remainder_without_int8_is_the_fp32_graph(ctx, tmp_path):
    import dataclasses

    s = ctx.settings
    c = dataclasses.replace(ctx, settings=dataclasses.replace(
        s, precision=dataclasses.replace(s.precision, remainder="fp32")))
    art = build_artifact(c, "fp16", plan_for_ranges(c, None, None), out_dir=tmp_path)
    assert art.is_fp32_graph and art.emulated is None
    assert [n.op_type for n in onnx.load(art.path).graph.node] == \
        [n.op_type for n in ctx.graph.model.graph.node]
