"""Stage "artifacts": every candidate of the run written and linted: fp16 (the original graph
with the remainder precision), and for every source the run writes (INT8; FP8 where
``precision.formats`` has it) one candidate per calibrator, each built one way
(:func:`quantkit.run.artifact.build_candidate`): the plan of its ranges, refined by the
source's per-plan steps, every node it leaves out of its format computing the original FP32
function, written and linted."""

from __future__ import annotations

from quantkit.run.artifact import Artifact, build_artifact, build_candidate
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.plans import plan_for_ranges
from quantkit.run.stages.calibration import Calibration
from quantkit.run.stages.ptq import Sources

__all__ = ["artifacts"]


def artifacts(ctx: RunContext, calibration: Calibration, overflow: Fp16Range,
              sources: Sources) -> dict[str, Artifact]:
    """name -> Artifact: ``fp16`` (``overflow``: the original graph's FP16 range check), then
    ``<format>.<calibrator>`` for every written source and calibrator."""
    out = {"fp16": build_artifact(ctx, "fp16", plan_for_ranges(ctx, None, overflow))}
    fallback = out["fp16"].plan
    for source in sources.writing():
        every = calibration.of(source.format)
        for method, ranges in every.items():
            name = source.candidate_name(method)
            out[name] = build_candidate(ctx, source, name, ranges, every, fallback)
    return out
