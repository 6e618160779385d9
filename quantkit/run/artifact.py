"""One candidate artifact: Plan -> Q/DQ (when quantized) -> FP16 casts -> lint ->
model.<name>.onnx.

Every candidate artifact (fp16, int8.<calibrator>, fp8.<calibrator>, the search's mixed plan
and its variants) is built by :func:`build_artifact` from one Plan on a ModelGraph."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import onnx

from quantkit.backends.spill import KeptModel, LazySpilledModel, SpilledModel
from quantkit.errors import GraphEditError
from quantkit.fsutil import atomic_write_json
from quantkit.graph.facts import opset_version
from quantkit.graph.model_graph import ModelGraph
from quantkit.models.model import write_model_atomic
from quantkit.precision.fp8_rules import fp8_exclusions
from quantkit.precision.plan import Plan, Precision, build_plan
from quantkit.ptq.pipeline import Refined
from quantkit.ptq.step_record import StepRecord
from quantkit.qdq.casts import convert_fp16, emulate_fp16, to_opset
from quantkit.qdq.fp8 import FP8_OPSET
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import lint_for_target
from quantkit.qdq.targets import activation_ranges, get_target
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.quant_source import QuantSource

__all__ = ["Artifact", "ParkedRefined", "build_artifact", "build_variant", "fp8_model_graph",
           "fp8_plan", "plan_for_ranges"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Artifact:
    """One written candidate: ``path`` (model.<name>.onnx), its sha256 and Plan.

    ``emulated``: a zero-argument callable that builds the FP16 emulation of the same plan
    on first use and reads it back from a private temporary file afterwards (None when the
    plan has no FP16 node); ``is_fp32_graph``: the file is the FP32 graph unchanged (an FP32
    remainder without INT8 nodes). ``refined``: the INT8 plan's FP32 graph after the ptq
    steps (parked on disk: ``refined.load()``), None for a candidate on the original graph
    without per-plan edits; ``steps``: the StepRecords of every ptq step behind it (the
    rewrites, then the per-plan steps). No graph beyond the run's own is held in memory
    between stages (backends/spill.py)."""

    name: str
    path: str
    sha256: str
    plan: Plan
    target: str
    lint: dict
    emulated: Callable[[], onnx.ModelProto] | None = None
    is_fp32_graph: bool = False
    refined: ParkedRefined | None = None
    steps: tuple[StepRecord, ...] = ()

    @property
    def activation_amax(self) -> dict[str, float]:
        return dict(self.plan.activation_amax)

    def to_record(self) -> dict:
        out = {"plan_counts": self.plan.counts(), "lint": dict(self.lint),
               "artifact_sha256": self.sha256}
        if self.steps:
            out["ptq"] = [r.to_dict() for r in self.steps]
        return out


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


def plan_for_ranges(ctx: RunContext, ranges, overflow: Fp16Range | None,
                    graph: ModelGraph | None = None) -> Plan:
    """The Plan of one calibrator's ranges on ``graph`` (default: the run's; the ptq graph
    for INT8 plans), or without ranges the FP16 / FP32 candidate's plan."""
    p, graph = ctx.settings.precision, graph or ctx.graph
    plan = build_plan(graph.model, amax=ranges.amax if ranges else {},
                      excluded=ranges.excluded if ranges else {}, op_types=p.op_types,
                      include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                      force=dict(p.force), remainder=p.remainder,
                      fp32_nodes_reasons=overflow.fp32_nodes if overflow else {},
                      calibrator=ranges.calibrator if ranges else "", infos=graph.infos,
                      fp32_ops=p.fp32_ops)
    if ranges:  # signed min/max for asymmetric targets (ort_cpu); carried by the plan
        seen = activation_ranges(ranges.summary)
        plan = dataclasses.replace(plan, activation_range={
            t: seen[t] for t in plan.activation_amax if t in seen})
    return plan


def build_artifact(ctx: RunContext, name: str, plan: Plan, *, graph: ModelGraph | None = None,
                   model: onnx.ModelProto | None = None, out_dir: Path | None = None,
                   nonfinite: Iterable[str] = (), int8_weights: bool = False,
                   steps: tuple[StepRecord, ...] = (), refined: ParkedRefined | None = None
                   ) -> Artifact:
    """``plan`` -> the linted artifact file under ``out_dir`` (default: the run dir) plus
    plans/<name>.json (and its QdqMap). ``graph``: the ModelGraph the plan's node names come
    from (default: the run's; the ptq graph); ``model``: the FP32 graph to quantize when it
    is not ``graph.model`` (the ptq steps' edits); ``nonfinite``: tensors the lint must find
    unquantized (TRT rule 9); ``int8_weights``: INT8 weights as int8 initializers;
    ``steps`` / ``refined``: the ptq steps behind it, recorded and kept for variants."""
    p = ctx.settings.precision
    graph = graph or ctx.graph
    out_dir = Path(out_dir) if out_dir is not None else ctx.run_dir
    target = get_target(ctx.settings.target)
    source = graph.model if model is None else model
    if plan.quantized_nodes():
        edited, qmap = insert_qdq(source, plan, target=target, infos=graph.infos,
                                  int8_weights=int8_weights)
    else:
        edited, qmap = source, None
    infos = graph.infos if edited is graph.model else None  # an edited graph: its own facts
    scales = p.qdq_scale_dtype if plan.quantized_nodes() else "fp32"  # fp16 scales: Q/DQ only
    final = (convert_fp16(edited, plan, infos=infos, qdq_scale_dtype=scales)
             if p.remainder == "fp16" else edited)
    violations = lint_for_target(final, target.name, nonfinite_tensors=set(nonfinite))
    if violations:
        raise GraphEditError(f"{len(violations)} {target.lint} Q/DQ rule violations in {name}",
                             where=str(violations[0]), fix="report this as a bug")
    path = out_dir / f"model.{name}.onnx"
    sha = write_model_atomic(final, path)
    atomic_write_json(out_dir / "plans" / f"{name}.json", plan.to_dict())
    if qmap is not None:
        atomic_write_json(out_dir / "plans" / f"{name}.qdqmap.json", qmap.to_dict())
    is_fp32_graph = final is ctx.graph.model
    del final
    emulated = None
    if p.remainder == "fp16" and plan.nodes_with("fp16"):
        # the Q/DQ graph waits on disk for the emulation's first use (the run's own graph
        # needs no copy); the emulation itself is parked on disk once built
        parked = None if edited is graph.model else SpilledModel(edited, name=f"{name}.qdq")
        emulated = LazySpilledModel(
            lambda: emulate_fp16(graph.model if parked is None else parked.load(), plan,
                                 infos=infos, qdq_scale_dtype=scales),
            name=f"{name}.emulated")
    return Artifact(name=name, path=str(path), sha256=sha, plan=plan, target=target.name,
                    lint={"violations": 0, "rules": target.lint}, emulated=emulated,
                    is_fp32_graph=is_fp32_graph, refined=refined, steps=tuple(steps))


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


def build_variant(ctx: RunContext, name: str, base: Artifact, plan: Plan,
                  source: QuantSource, fallback: Plan, *, out_dir: Path | None = None
                  ) -> Artifact:
    """``plan`` (a subset of ``base``'s INT8 nodes: the search's mixed plans) built the way
    ``base`` was: its INT8 nodes keep ``base``'s ptq edits, every other node computes the
    original FP32 function (:meth:`QuantSource.restored_for`); ``fallback``: the original
    graph's plan (the FP16 candidate's), whose decisions restored nodes take."""
    refined = source.variant_refined(ctx, base.refined)
    if refined is None:
        return build_artifact(ctx, name, plan, graph=source.graph, out_dir=out_dir,
                              int8_weights=source.recipe.int8_weights, steps=base.steps)
    variant = source.restored_for(refined, plan, fallback)
    model = None if variant.model is source.graph.model else variant.model
    return build_artifact(ctx, name, variant.plan, graph=source.graph, model=model,
                          out_dir=out_dir, int8_weights=source.recipe.int8_weights,
                          steps=source.steps + refined.records)
