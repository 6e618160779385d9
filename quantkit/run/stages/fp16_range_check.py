"""Stage "fp16_range_check": the original graph's nodes whose FP32 values exceed the FP16 range
on a few calibration samples stay FP32 (quantkit/run/fp16_range.py; the ptq stage checks a
rewritten graph the same way)."""

from __future__ import annotations

from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range, check_fp16_range

__all__ = ["fp16_range_check"]


def fp16_range_check(ctx: RunContext) -> Fp16Range:
    """The FP16 range check of the run's FP32 graph."""
    return check_fp16_range(ctx, ctx.graph)
