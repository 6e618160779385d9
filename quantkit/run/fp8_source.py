"""The FP8 E4M3 source (:class:`Fp8Source`): FP8 candidates are planned on the original graph at
opset 19 (float8 Q/DQ) with no INT8 ptq step, their weights FP8 initializers rounded as
``precision.fp8_weight_rounding`` says (quantkit/run/fp8_weights.py), their activations
calibrated on the original graph with the FP8 calibrators (minmax, percentile, mse on the
FP8 grid). SmoothQuant, equalization, the range search and bias correction are INT8's
answers to INT8's coarse grid (issue 25: FP8 needs little of that machinery), so an FP8
candidate is the model's own FP32 function behind FP8 Q/DQ."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import onnx

from quantkit.calibrate.ranges import Ranges
from quantkit.graph.facts import opset_version
from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.fp8_rules import fp8_exclusions
from quantkit.precision.plan import Plan, Precision
from quantkit.ptq.pipeline import Refined
from quantkit.qdq.casts import to_opset
from quantkit.qdq.fp8 import FP8_OPSET
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.fp8_weights import FP8_CHOOSER, Fp8Weights, fp8_weights
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.quant_source import QuantSource
from quantkit.run.scope import QuantScope

__all__ = ["Fp8Source", "fp8_model_graph", "fp8_plan"]


@dataclass(frozen=True)
class Fp8Source(QuantSource):
    """``graph``: the original at opset 19 (plans, Q/DQ); ``original``: the run's FP32 graph
    (calibrated: its ``scope``; its ``fp16`` range check); ``reference``: FP32 on dev, which
    ``precision.fp8_weight_rounding=auto`` scores the weight rounding against."""

    format: ClassVar[str] = "fp8"
    graph: ModelGraph
    original: ModelGraph
    scope: QuantScope
    fp16: Fp16Range
    reference: Evaluation = field(compare=False, repr=False)
    #: the rounding decided for the run's FP8 plans, by the chooser plan's hash
    _weights: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def calib_graph(self) -> ModelGraph:
        return self.original

    @property
    def int8_weights(self) -> bool:
        return True  # FP8 weights are FP8 initializers behind one DequantizeLinear

    def plan(self, ctx: RunContext, ranges: Ranges) -> Plan:
        """The INT8-style plan of ``ranges`` with its nodes in FP8 where TensorRT runs FP8
        (:func:`fp8_plan`), the rest in the remainder precision."""
        return fp8_plan(super().plan(ctx, ranges), ranges.calibrator, self.graph.model,
                        ctx.settings.precision.remainder)

    def refine(self, ctx: RunContext, plan: Plan, ranges: Mapping[str, Ranges]) -> Refined:
        """``plan`` with its FP8 nodes' weights rounded as decided once for the run's FP8
        plans, on the plan of :data:`~quantkit.run.fp8_weights.FP8_CHOOSER`'s calibrator (or
        the first one) among ``ranges``; every other node keeps the original weights."""
        weights = self.weights(ctx, ranges)
        model = weights.model_for(self.graph.model, plan)
        return Refined(plan=plan, model=self.graph.model if model is None else model,
                       records=weights.steps())

    def weights(self, ctx: RunContext, ranges: Mapping[str, Ranges]) -> Fp8Weights:
        """The FP8 weights decision (quantkit/run/fp8_weights.py), made once per chooser plan."""
        chooser = ranges.get(FP8_CHOOSER.split(".", 1)[1]) or next(iter(ranges.values()))
        plan = self.plan(ctx, chooser)
        key = hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True,
                                        default=str).encode()).hexdigest()
        if key not in self._weights:
            self._weights[key] = fp8_weights(ctx, self.graph, plan, self.reference)
        return self._weights[key]

    @classmethod
    def of(cls, ctx: RunContext, scope: QuantScope, fp16: Fp16Range, reference: Evaluation
           ) -> "Fp8Source":
        """The run's FP8 source: ``scope`` / ``fp16`` of the original graph."""
        return cls(graph=fp8_model_graph(ctx.graph), original=ctx.graph, scope=scope,
                   fp16=fp16, reference=reference)


def fp8_model_graph(graph: ModelGraph) -> ModelGraph:
    """The graph FP8 candidates are planned on: the original, at opset 19 (float8 Q/DQ) when
    it is below; the conversion keeps the FP32 function and the names of every node and
    tensor it does not add."""
    if opset_version(graph.model) >= FP8_OPSET:
        return graph
    return ModelGraph.build(to_opset(graph.model, FP8_OPSET, why="FP8 Q/DQ"))


def fp8_plan(plan: Plan, name: str, model: onnx.ModelProto, remainder: str) -> Plan:
    """``plan``'s INT8 nodes in FP8 E4M3 where TensorRT runs FP8 (GEMMs, and convolutions
    with FP8 kernels: ``precision.fp8_rules``), any other INT8 node in ``remainder``
    (fp16 / fp32) with the reason.

    FP8 candidates are planned on the original graph with no INT8 ptq step: SmoothQuant,
    equalization, the range search and bias correction are INT8's answers to INT8's coarse
    grid (issue 25: FP8 needs little of that machinery), so an FP8 candidate is the model's
    own FP32 function behind FP8 Q/DQ, its weights FP8 initializers behind one
    DequantizeLinear, rounded onto the FP8 grid as ``run/fp8_weights.py`` chooses."""
    int8 = plan.int8_nodes()
    out_of_fp8 = fp8_exclusions(model, int8)
    out = plan.with_precision([n for n in int8 if n not in out_of_fp8], Precision.FP8,
                              f"FP8 E4M3 ({name}: amax / 448 per tensor)")
    for why in dict.fromkeys(out_of_fp8.values()):  # one edit per reason, in graph order
        out = out.with_precision([n for n, w in out_of_fp8.items() if w == why], remainder,
                                 why)
    return out
