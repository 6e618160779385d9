"""Stage backend_check: the artifact on ONNX Runtime vs its FP16 emulation."""

from __future__ import annotations

import dataclasses

from quantkit.run import check_backend


def test_int8_artifact_agrees_with_its_emulation(ctx, artifacts):
    res = check_backend(ctx, artifacts["int8.minmax"]).to_record()
    assert res["checked"] and res["n"] == min(16, len(ctx.splits.eval))
    assert 0.0 <= res["agreement"] <= 1.0 and set(res["accuracy"]) == {"artifact", "emulated"}
    assert res["ok"] == (res["agreement"] >= ctx.settings.compare.backend_check_min_agreement
                         and abs(res["accuracy"]["artifact"] - res["accuracy"]["emulated"])
                         <= ctx.settings.compare.backend_check_max_accuracy_gap)


def test_nothing_to_check_without_an_emulation(ctx, artifacts):
    art = dataclasses.replace(artifacts["int8.minmax"], emulated=None)
    assert check_backend(ctx, art).to_record() == {"checked": False}
