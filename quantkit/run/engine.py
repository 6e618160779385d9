"""A strongly typed TensorRT engine for one artifact (backend=trt): the EngineBuild value the
evaluation and latency stages read (never the record). The work is
:func:`quantkit.backends.trt.infer.build_for_run`; this module gives it the run's context."""

from __future__ import annotations

from quantkit.backends.trt.infer import build_for_run
from quantkit.run.context import RunContext

__all__ = ["build_trt_engine"]


def build_trt_engine(ctx: RunContext, onnx_path, planned_int8: list[str] | None,
                     planned_fp8: list[str] | None = None):
    """Engine for ``onnx_path`` (cached by ONNX, settings, TensorRT, GPU under cache_dir),
    on ``backend.trt.device``, with the INT8 / FP8 layer checks when such nodes are planned."""
    return build_for_run(ctx.settings, onnx_path, planned_int8, planned_fp8=planned_fp8,
                         cache_dir=ctx.cache_dir / "engines")
