"""Stage "artifacts": Plan -> Q/DQ (when INT8) -> FP16 casts -> lint -> model.<name>.onnx.

Every candidate artifact (fp16, int8.<calibrator>, the search's mixed plan) is built by
:func:`build_artifact` from one Plan on the run's ModelGraph."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantkit.run.calibration import Calibration
from quantkit.run.context import RunContext
from quantkit.run.fp16_range import Fp16Range

__all__ = ["Artifact", "plan_for_ranges", "build_artifact", "build_artifacts", "rebuild_args"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Artifact:
    """One written candidate: ``path`` (model.<name>.onnx), its sha256 and Plan.

    ``emulated``: a zero-argument callable that builds the FP16 emulation of the same plan
    on first use and reads it back from a private temporary file afterwards (None when the
    plan has no FP16 node); ``is_fp32_graph``: the file is the FP32 graph unchanged (an FP32
    remainder without INT8 nodes). No graph beyond the run's own is held in memory between
    stages: the emulation and a bias-corrected source are parked on disk
    (backends/spill.py), read back when a stage needs them."""

    name: str
    path: str
    sha256: str
    plan: object  # quantkit.precision.plan.Plan
    target: str
    lint: dict
    emulated: Callable | None = None
    is_fp32_graph: bool = False
    #: the FP32 graph the plan's Q/DQ went into when ptq rewrote it (None: ctx.graph.model):
    #: a bias-corrected copy parked on disk (SpilledModel) or the ptq graph (KeptModel);
    #: read it as ``source_model``
    source_file: Any = None
    #: the ModelGraph the plan was built on when ptq rewrote the graph (None: ctx.graph);
    #: its ``infos`` type ``source_model`` (same tensors)
    quant_graph: Any = None
    int8_weights: bool = False
    #: StepRecords of the ptq steps behind this artifact (quantkit/run/ptq.py)
    ptq: tuple = ()

    @property
    def source_model(self):
        """The FP32 graph the plan's Q/DQ went into when ptq rewrote it (None:
        ctx.graph.model), read back from disk; a stage that re-inserts Q/DQ for this plan
        (the search) must start from it."""
        return None if self.source_file is None else self.source_file.load()

    @property
    def activation_amax(self) -> dict[str, float]:
        return dict(self.plan.activation_amax)

    def to_record(self) -> dict:
        out = {"plan_counts": self.plan.counts(), "lint": dict(self.lint),
               "artifact_sha256": self.sha256}
        if self.ptq:
            out["ptq"] = [r.to_dict() for r in self.ptq]
        return out


def plan_for_ranges(ctx: RunContext, ranges, overflow: Fp16Range | None):
    """The Plan of one calibrator's ranges (None: no INT8, the FP16 / FP32 candidate)."""
    from quantkit.precision.plan import build_plan
    from quantkit.qdq.targets import activation_ranges

    p, graph = ctx.settings.precision, ctx.graph
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


def build_artifact(ctx: RunContext, name: str, plan, *, out_dir: Path | None = None,
                   nonfinite: Iterable[str] = (), model=None, int8_weights: bool = False,
                   ptq_records: tuple = ()) -> Artifact:
    """``plan`` on the run's graph -> the linted artifact file under ``out_dir`` (default:
    the run dir) plus plans/<name>.json (and its QdqMap). ``nonfinite``: tensors the lint
    must find unquantized (TRT rule 9). ``model``: the FP32 graph to quantize when ptq
    edited a copy of ``ctx.graph.model`` (same tensors; bias correction); ``int8_weights``:
    INT8 weights as int8 initializers; ``ptq_records``: the steps behind it, recorded."""
    from quantkit.backends.spill import LazySpilledModel, SpilledModel
    from quantkit.errors import GraphEditError
    from quantkit.models.base import write_json_atomic, write_model_atomic
    from quantkit.ptq.graphutil import restore_unquantized
    from quantkit.qdq.casts import convert_fp16, emulate_fp16
    from quantkit.qdq.insert import insert_qdq
    from quantkit.qdq.lint import lint_for_target
    from quantkit.qdq.targets import get_target

    p, graph = ctx.settings.precision, ctx.graph
    out_dir = Path(out_dir) if out_dir is not None else ctx.run_dir
    target = get_target(ctx.settings.target)
    source = graph.model if model is None else model
    if model is not None and model is not graph.model:
        # rounding / bias correction edited INT8 nodes' constants: a node this plan keeps in
        # FP16 / FP32 gets the original ones back (the search's mixed plans)
        source, restored = restore_unquantized(model, graph.model, plan.int8_nodes())
        if restored:
            log.info("%s: %d non-INT8 nodes keep their original constants", name, len(restored))
    if plan.int8_nodes():
        edited, qmap = insert_qdq(source, plan, target=target, infos=graph.infos,
                                  int8_weights=int8_weights)
    else:
        edited, qmap = source, None
    infos = graph.infos if edited is graph.model else None  # an edited graph: its own facts
    scales = p.qdq_scale_dtype if plan.int8_nodes() else "fp32"  # fp16 scales: Q/DQ only
    final = (convert_fp16(edited, plan, infos=infos, qdq_scale_dtype=scales)
             if p.remainder == "fp16" else edited)
    violations = lint_for_target(final, target.name, nonfinite_tensors=set(nonfinite))
    if violations:
        raise GraphEditError(f"{len(violations)} {target.lint} Q/DQ rule violations in {name}",
                             where=str(violations[0]), fix="report this as a bug")
    path = out_dir / f"model.{name}.onnx"
    sha = write_model_atomic(final, path)
    write_json_atomic(plan.to_dict(), out_dir / "plans" / f"{name}.json")
    if qmap is not None:
        write_json_atomic(qmap.to_dict(), out_dir / "plans" / f"{name}.qdqmap.json")
    is_fp32_graph = final is graph.model
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
                    is_fp32_graph=is_fp32_graph,
                    source_file=(None if model is None  # as given: rebuilds restore again
                                 else SpilledModel(model, name=f"{name}.source")),
                    ptq=tuple(ptq_records), int8_weights=int8_weights)


def build_artifacts(ctx: RunContext, calibration: Calibration, overflow: Fp16Range
                    ) -> dict[str, Artifact]:
    """The FP16 candidate and one INT8 candidate per calibrator, in that order.

    With the ptq stage (``calibration.ptq``): the FP16 candidate stays on the original graph
    (no INT8 node, nothing for ptq to do); each INT8 plan is built on the ptq graph, refined
    by range search / bias correction (:func:`quantkit.run.ptq.refine_plan`) and written
    with ``ptq.int8_weights``."""
    from quantkit.backends.spill import KeptModel
    from quantkit.run.fp16_range import check_fp16_range
    from quantkit.run.ptq import refine_plan

    out = {"fp16": build_artifact(ctx, "fp16", plan_for_ranges(ctx, None, overflow))}
    state = calibration.ptq
    if state is None:
        for method, rng in calibration.ranges.items():
            name = f"int8.{method}"
            out[name] = build_artifact(ctx, name, plan_for_ranges(ctx, rng, overflow),
                                       nonfinite=rng.excluded)
        return out
    qctx = ctx if state.graph is ctx.graph else dataclasses.replace(ctx, graph=state.graph)
    if state.graph is not ctx.graph and ctx.settings.precision.remainder == "fp16":
        overflow = check_fp16_range(ctx, graph=state.graph)  # the FP16 casts go into it
    memo: dict = {}  # bias-correction statistics, shared by the calibrators' plans
    for method, rng in calibration.ranges.items():
        name = f"int8.{method}"
        plan, model, records = refine_plan(ctx, state, plan_for_ranges(qctx, rng, overflow),
                                           calibration.ranges, memo)
        art = build_artifact(qctx, name, plan, nonfinite=rng.excluded,
                             model=None if model is state.graph.model else model,
                             int8_weights=state.options.int8_weights,
                             ptq_records=state.records + records)
        rewritten = state.graph is not ctx.graph
        if art.source_file is None and model is not ctx.graph.model:  # the ptq graph itself
            art = dataclasses.replace(art, source_file=KeptModel(model))
        out[name] = dataclasses.replace(art, is_fp32_graph=art.is_fp32_graph and not rewritten,
                                        quant_graph=state.graph if rewritten else None)
    return out


def rebuild_args(ctx: RunContext, art: Artifact) -> tuple[RunContext, dict]:
    """What rebuilds a variant of ``art``'s plan (the search's mixed plans) the way ``art``
    was built: the context whose graph the plan names (the ptq graph when ptq rewrote it)
    and the :func:`build_artifact` keywords (``model``, ``int8_weights``, ``ptq_records``).

        ctx, kw = rebuild_args(ctx, int8[best]); build_artifact(ctx, "mixed", plan, **kw)
    """
    c = ctx if art.quant_graph is None else dataclasses.replace(ctx, graph=art.quant_graph)
    return c, {"model": art.source_model, "int8_weights": art.int8_weights,  # read from disk
               "ptq_records": art.ptq}
