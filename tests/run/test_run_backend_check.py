"""Stage backend_check: the artifact as ONNX Runtime runs it vs its FP16 emulation, gated at a
share of the sign-off margin, with the numerics noise of two equivalent executions."""

from __future__ import annotations

import dataclasses

from quantkit.run import check_backend


def test_int8_artifact_is_gated_against_its_emulation(ctx, artifacts, reference):
    res = check_backend(ctx, artifacts["int8.minmax"], reference).to_record()
    assert res["checked"] and res["n"] == min(16, len(ctx.splits.dev))
    assert 0.0 <= res["agreement"] <= 1.0 and set(res["accuracy"]) == {"artifact", "emulated"}
    gate = res["gate"]
    # the tolerance is a share of the absolute margin (relative 1% of FP32 dev accuracy)
    margin = ctx.settings.verdict.margin * reference.metric("accuracy")
    assert abs(gate["tolerance"] - ctx.settings.compare.numerics_margin_share * margin) < 1e-12
    assert gate["n"] == res["n"] and res["ok"] == (gate["status"] != "fail")
    # 16 examples can never show a flip rate below a tolerance of 0.005: not a pass
    assert gate["status"] in ("fail", "inconclusive")
    assert gate["noise_flip_rate"] is not None  # exact vs integer-exact kernels measured
    assert res["blocks_recommendation"] is False  # ORT CPU is not target=tensorrt's runtime


def test_nothing_to_check_without_an_emulation(ctx, artifacts, reference):
    art = dataclasses.replace(artifacts["int8.minmax"], emulated=None)
    assert check_backend(ctx, art, reference).to_record() == {"checked": False}
