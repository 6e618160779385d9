"""What every quantized format's source has (DESIGN.md: the PTQ stage's typed values), and the
post-training pipeline's runners, memo and calibration data the sources share.

A source is one format's way to candidates: the graph its plans name and its Q/DQ go into,
the tensors it calibrates on its own grid, and the per-plan steps. Calibration, the
artifacts stage, the recipe trials and the mixed search build every candidate of every
format the same way:

    ranges = source.ranges(ctx)                        # calibrator -> Ranges, on its grid
    plan = source.plan(ctx, ranges[calibrator])        # node -> format | fp16 | fp32
    refined = source.refined_for(ctx, plan, ranges, fallback)   # ptq steps, FP32 restored
    graph = realize(refined.model, refined.plan, source.realization(ctx), numerics=...)

:class:`~quantkit.run.int8_source.Int8Source` (the recipe's rewrites, range search, weight
rounding, bias correction) and :class:`~quantkit.run.fp8_source.Fp8Source` (the original
graph at opset 19, FP8 weight rounding) are the two formats today; a next format is one more
subclass (Model-Optimizer's ``onnx/quantization/{int8,fp8,int4}.py`` behind one dispatch).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx

from quantkit.backends.runners import ort_runner
from quantkit.backends.spill import KeptModel, SpilledModel
from quantkit.calibrate.calibrators import Calibrator
from quantkit.calibrate.ranges import Ranges
from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.plan import Plan
from quantkit.ptq.pipeline import CalibData, Refined, Runners
from quantkit.ptq.step_record import StepRecord
from quantkit.qdq.realize import Realization
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.plans import plan_for_ranges
from quantkit.run.ranges import calibrators_for, source_ranges
from quantkit.run.scope import QuantScope
from quantkit.settings import CalibratorConfig

__all__ = ["ParkedRefined", "QuantSource", "calib_data", "ptq_key", "ptq_memo", "ptq_runners"]


class QuantSource(ABC):
    """One quantized format's source of candidates (module doc). Subclasses are frozen
    dataclasses with the fields ``graph`` (the ModelGraph plans name and Q/DQ go into),
    ``scope`` (the quantization scope on :attr:`calib_graph`) and ``fp16`` (the FP16 range
    check of ``graph``)."""

    #: the quantized format: the candidates' name prefix (``int8.minmax``) and Q/DQ grid
    format: ClassVar[str]
    graph: ModelGraph
    scope: QuantScope
    fp16: Fp16Range

    @property
    def calib_graph(self) -> ModelGraph:
        """The graph whose activations are calibrated (``graph`` unless a subclass says)."""
        return self.graph

    @property
    @abstractmethod
    def int8_weights(self) -> bool:
        """Weights stored quantized behind one DequantizeLinear (TRT rule 8)."""

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """The steps behind every candidate of this source (the recipe's rewrites)."""
        return ()

    def candidate_name(self, calibrator: str) -> str:
        """The candidate of ``calibrator``'s ranges: ``<format>.<calibrator>``."""
        return f"{self.format}.{calibrator}"

    def ranges_name(self, calibrator: str) -> str:
        """The name ``calibrator``'s ranges are saved under (``ranges/<name>.json``)."""
        return self.candidate_name(calibrator)

    def calibrators(self, config: CalibratorConfig) -> dict[str, Calibrator]:
        """calibrator name -> calibrator on this format's grid, from ``calibrator.*``."""
        return calibrators_for(config, grid=self.format)

    def ranges(self, ctx: RunContext, *, progress: bool | None = None) -> dict[str, Ranges]:
        """calibrator -> Ranges of :attr:`scope`'s tensors on :attr:`calib_graph`: one
        stage-cached statistics pass shared by every calibrator (quantkit/run/ranges.py)."""
        return source_ranges(ctx, self.calib_graph, list(self.scope.tensors),
                             {self.ranges_name(m): c
                              for m, c in self.calibrators(ctx.settings.calibrator).items()},
                             progress=progress)

    def plan(self, ctx: RunContext, ranges: Ranges) -> Plan:
        """The Plan of one calibrator's ranges on :attr:`graph`."""
        return plan_for_ranges(ctx, ranges, self.fp16, self.graph)

    @abstractmethod
    def refine(self, ctx: RunContext, plan: Plan, ranges: Mapping[str, Ranges]) -> Refined:
        """The per-plan steps of ``plan`` (``ranges``: every calibrator's, by name)."""

    def restored_for(self, refined: Refined, plan: Plan, fallback: Plan) -> Refined:
        """``refined`` for ``plan`` with every node out of the format computing the original
        FP32 function; ``fallback``: the original graph's plan (the fp16 candidate's)."""
        return refined

    def refined_for(self, ctx: RunContext, plan: Plan, ranges: Mapping[str, Ranges],
                    fallback: Plan) -> Refined:
        """``plan`` refined and restored: the graph and plan a candidate is written from."""
        refined = self.refine(ctx, plan, ranges)
        return self.restored_for(refined, refined.plan, fallback)

    def park(self, refined: Refined, name: str) -> ParkedRefined | None:
        """``refined`` kept for the mixed search's variants (None: this format has none)."""
        return None

    def realization(self, ctx: RunContext) -> Realization:
        """How this source's plans become graphs under the run's settings."""
        p = ctx.settings.precision
        return Realization(target=ctx.settings.target, remainder=p.remainder,
                           qdq_scale_dtype=p.qdq_scale_dtype, int8_weights=self.int8_weights)


@dataclass(frozen=True)
class ParkedRefined:
    """A :class:`~quantkit.ptq.pipeline.Refined` whose graph waits on disk (or is one of the
    run's own graphs, kept): ``load()`` gives the Refined back."""

    plan: Plan
    model_file: KeptModel | SpilledModel
    records: tuple[StepRecord, ...]

    @classmethod
    def park(cls, refined: Refined, *, keep: onnx.ModelProto, name: str) -> "ParkedRefined":
        """``refined`` parked on disk, unless its graph is ``keep`` (held by the run anyway)."""
        f = (KeptModel(refined.model) if refined.model is keep
             else SpilledModel(refined.model, name=f"{name}.refined"))
        return cls(plan=refined.plan, model_file=f, records=refined.records)

    def load(self) -> Refined:
        return Refined(plan=self.plan, model=self.model_file.load(), records=self.records)


def ptq_key(ctx: RunContext) -> dict[str, Any]:
    """The ptq settings as a stage-cache key part (the recipe setting and its parameters)."""
    return {"ptq": dataclasses.asdict(ctx.settings.ptq)}


def calib_data(ctx: RunContext, *, limit: int | None = None) -> CalibData:
    """The calibration split as the pipeline reads it (``limit``: its first examples)."""
    s = ctx.settings
    split = ctx.splits.calib if limit is None else ctx.head(ctx.splits.calib, limit)
    n = s.ptq.range_search_samples
    return CalibData(
        batches=lambda: ctx.batches(split, s.calibrator.batch_size),
        subset=lambda: ctx.batches(ctx.head(split, n), s.calibrator.batch_size),
        key={"calib": split.sha256, "subset": n, "batch_size": s.calibrator.batch_size,
             "max_length": s.data.max_length, **ctx.feeds_key()})


def ptq_runners(ctx: RunContext, graph: ModelGraph | None = None) -> Runners:
    """The pipeline's ONNX Runtime runners with the run's backend settings: FP32 capture
    typed from ``graph``'s one shape inference, exact Q/DQ for the sequential rounding."""
    b = ctx.settings.backend

    def capture(m, outs):
        return ort_runner(b, m, name="ptq-capture", extra_outputs=outs,
                          graph=graph if graph is not None and m is graph.model else None)

    return Runners(capture=capture,
                   exact=lambda m: ort_runner(b, m, name="ptq-sequential", qdq_mode="exact",
                                              memory_arena=False),
                   fp32=lambda m: ort_runner(b, m, name="ptq-proof"))


def ptq_memo(ctx: RunContext):
    """The pipeline's memo on the run's stage cache (``stage_cache=false``: computes); its
    keys name the execution environment (the passes run ONNX Runtime and numpy's BLAS)."""
    env = ctx.measured_key()

    def memo(kind: str, key: dict, compute):
        obj, arrays, _ = ctx.cached(kind, {**key, **env}, compute)
        return obj, arrays
    return memo
