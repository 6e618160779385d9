"""ONNX shape inference runs once per run on the FP32 graph (issue 14): ModelGraph holds the
result and every later stage reads it. Counted with a real profiler hook on
onnx.shape_inference.infer_shapes over a whole in-process run (nothing is patched)."""

from __future__ import annotations

import sys
import threading

import onnx
import pytest

from runworld import compose_cfg


def _signature(model) -> list[tuple]:
    return [(n.op_type, tuple(n.input), tuple(n.output)) for n in model.graph.node]


@pytest.mark.parametrize("extra", [(), ("target=ort_cpu",)], ids=["tensorrt", "ort_cpu"])
def test_fp32_graph_is_shape_inferred_once_per_run(tiny, tmp_path, extra):
    from quantkit.app import run

    fp32 = _signature(onnx.load(str(tiny["model"])))
    code = onnx.shape_inference.infer_shapes.__code__
    calls = {"fp32": 0, "other": 0}

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            model = frame.f_locals.get("model")
            same = isinstance(model, onnx.ModelProto) and _signature(model) == fp32
            calls["fp32" if same else "other"] += 1

    cfg = compose_cfg(tiny, f"stage_cache_dir={tmp_path / 'stages'}", *extra)
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        rec = run(cfg, out_dir=tmp_path / "run")
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert rec.candidates["int8.minmax"].plan_counts["int8"] > 0  # the run did real work
    assert calls["other"] > 0  # edited graphs are inferred (so the hook sees calls at all)
    assert calls["fp32"] == 1
