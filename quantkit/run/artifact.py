"""One candidate artifact: Plan -> Q/DQ (when quantized) -> FP16 casts -> lint ->
model.<name>.onnx.

Every candidate artifact (fp16, int8.<calibrator>, fp8.<calibrator>, the search's mixed plan
and its variants) is built by :func:`build_artifact` from one Plan on a ModelGraph."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import onnx

from quantkit.backends.spill import LazySpilledModel, SpilledModel
from quantkit.calibrate.ranges import Ranges
from quantkit.errors import GraphEditError
from quantkit.fsutil import atomic_write_json
from quantkit.graph.model_graph import ModelGraph
from quantkit.models.model import write_model_atomic
from quantkit.precision.plan import Plan
from quantkit.ptq.step_record import StepRecord
from quantkit.qdq.lint import lint_for_target
from quantkit.qdq.realize import Realization, finish, quantize
from quantkit.qdq.targets import get_target
from quantkit.run.context import RunContext
from quantkit.run.int8_source import Int8Source
from quantkit.run.quant_source import ParkedRefined, QuantSource

__all__ = ["Artifact", "build_artifact", "build_candidate", "build_variant"]

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
    how = Realization(target=target.name, remainder=p.remainder,
                      qdq_scale_dtype=p.qdq_scale_dtype, int8_weights=int8_weights)
    edited, qmap = quantize(graph.model if model is None else model, plan, how,
                            infos=graph.infos)
    infos = graph.infos if edited is graph.model else None  # an edited graph: its own facts
    final = finish(edited, plan, how, numerics="deployed", infos=infos)
    violations = lint_for_target(final, target.name, nonfinite_tensors=set(nonfinite),
                                 activation_amax=plan.activation_amax,
                                 concat_range_ratio=p.concat_range_ratio)
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
            lambda: finish(graph.model if parked is None else parked.load(), plan, how,
                           numerics="emulated", infos=infos),
            name=f"{name}.emulated")
    return Artifact(name=name, path=str(path), sha256=sha, plan=plan, target=target.name,
                    lint={"violations": 0, "rules": target.lint}, emulated=emulated,
                    is_fp32_graph=is_fp32_graph, refined=refined, steps=tuple(steps))


def build_candidate(ctx: RunContext, source: QuantSource, name: str, ranges: Ranges,
                    every: Mapping[str, Ranges], fallback: Plan) -> Artifact:
    """Candidate ``name`` of ``source`` from one calibrator's ``ranges`` (``every``: all the
    calibrators' of this source, by name): its plan, refined by the source's per-plan steps
    and restored to the original FP32 function wherever it is not quantized, written and
    linted (``fallback``: the fp16 candidate's plan, whose decisions restored nodes take)."""
    refined = source.refined_for(ctx, source.plan(ctx, ranges), every, fallback)
    for r in refined.records:
        log.info("ptq %s (%s)", r.summary(), name)
    return build_artifact(
        ctx, name, refined.plan, graph=source.graph,
        model=None if refined.model is source.graph.model else refined.model,
        nonfinite=ranges.excluded, int8_weights=source.int8_weights,
        steps=source.steps + refined.records, refined=source.park(refined, name))


def build_variant(ctx: RunContext, name: str, base: Artifact, plan: Plan,
                  source: Int8Source, fallback: Plan, *, out_dir: Path | None = None
                  ) -> Artifact:
    """``plan`` (a subset of ``base``'s INT8 nodes: the search's mixed plans) built the way
    ``base`` was: its INT8 nodes keep ``base``'s ptq edits, every other node computes the
    original FP32 function (:meth:`Int8Source.restored_for`); ``fallback``: the original
    graph's plan (the FP16 candidate's), whose decisions restored nodes take."""
    refined = source.variant_refined(ctx, base.refined)
    if refined is None:
        return build_artifact(ctx, name, plan, graph=source.graph, out_dir=out_dir,
                              int8_weights=source.int8_weights, steps=base.steps)
    variant = source.restored_for(refined, plan, fallback)
    model = None if variant.model is source.graph.model else variant.model
    return build_artifact(ctx, name, variant.plan, graph=source.graph, model=model,
                          out_dir=out_dir, int8_weights=source.int8_weights,
                          steps=source.steps + refined.records)
