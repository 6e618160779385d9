"""The quantization scope of a run, decided once before calibration: which weighted nodes
may run INT8 and which activation tensors need a calibrated range (their inputs, the skip
inputs of residual Adds after INT8 Convs, the inputs of Concats whose output they read so
the plan can judge their ranges (issue 46), and for target ort_cpu the outputs ONNX Runtime
fuses). Calibration, plan building and Q/DQ insertion read this one value."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.calibrate.collect import activation_tensors, select_tensors
from quantkit.errors import ModelError
from quantkit.graph.facts import ancestor_nodes
from quantkit.graph.mixed_concat import concat_inputs_read_by
from quantkit.graph.model_graph import ModelGraph
from quantkit.graph.selection import NodeSelection
from quantkit.precision.plan import build_plan
from quantkit.qdq.placement import ort_cpu_output_tensors, residual_add_inputs
from quantkit.run.context import RunContext

__all__ = ["QuantScope", "quant_scope"]


@dataclass(frozen=True)
class QuantScope:
    """``targets``: the weighted nodes in scope (QuantTarget, graph order); ``tensors``: every
    activation to calibrate; ``extra_tensors``: those of them that are not a target's input
    (residual skips, ort_cpu fused outputs, the inputs of Concats a target reads: the plan's
    Concat rule compares their ranges); ``compare_tensors``: the per-layer comparison's
    tensors (inputs and outputs of every weighted node of ``precision.op_types``)."""

    target: str
    targets: tuple
    tensors: tuple[str, ...]
    extra_tensors: tuple[str, ...]
    compare_tensors: tuple[str, ...]

    @property
    def quant_nodes(self) -> int:
        return len(self.targets)


def quant_scope(ctx: RunContext, graph: ModelGraph | None = None) -> QuantScope:
    """The scope on ``graph`` (default: the run's ModelGraph) for ``settings.target`` and
    ``settings.precision``.

    ConfigError when an include / exclude pattern matches no node (quantkit.graph.selection).
    """
    p, graph = ctx.settings.precision, graph or ctx.graph
    NodeSelection.from_patterns(p.include_nodes, p.exclude_nodes).check_matches(graph.node_names)
    targets = select_tensors(graph.model, op_types=tuple(p.op_types),
                             include_nodes=tuple(p.include_nodes),
                             exclude_nodes=tuple(p.exclude_nodes))
    _check_output_depends_on(ctx, graph, targets)
    tensors = activation_tensors(targets)
    extra = [t for t in _fused_tensors(ctx, graph, tensors) if t not in set(tensors)]
    extra += [t for t in concat_inputs_read_by(graph.model.graph, tensors)
              if t not in set(tensors) | set(extra) and graph.infos.get(t) is not None
              and graph.infos[t].is_float32]
    compare: list[str] = []
    for t in select_tensors(graph.model, op_types=tuple(p.op_types)):
        compare.extend(t.activations)
        compare.extend(graph.node_outputs([t.node]))
    return QuantScope(target=ctx.settings.target, targets=tuple(targets),
                      tensors=tuple(tensors + extra), extra_tensors=tuple(extra),
                      compare_tensors=tuple(dict.fromkeys(compare)))


def _fused_tensors(ctx: RunContext, graph: ModelGraph, tensors: list[str]) -> list[str]:
    """Skip-branch inputs of residual Adds after INT8 Convs (TRT rule 6), plus for ort_cpu
    the Conv / residual-Add outputs ORT fuses (qdq/targets.py): the nodes that run INT8 once
    every scoped tensor has a range decide them."""
    p = ctx.settings.precision
    if "Conv" not in p.op_types:
        return []
    # the Concat rule is off: it reads real ranges, and a superset of the INT8 nodes only
    # calibrates a few skips more
    int8_if_calibrated = build_plan(graph.model, amax={t: 1.0 for t in tensors},
                                    op_types=p.op_types, include_nodes=p.include_nodes,
                                    exclude_nodes=p.exclude_nodes, remainder=p.remainder,
                                    infos=graph.infos, concat_range_ratio=None)
    found = residual_add_inputs(graph.model, int8_if_calibrated, infos=graph.infos)
    if ctx.settings.target == "ort_cpu":
        found += ort_cpu_output_tensors(graph.model, int8_if_calibrated, infos=graph.infos)
    return list(dict.fromkeys(found))


def _check_output_depends_on(ctx: RunContext, graph: ModelGraph, targets) -> None:
    """The compared output must be computed from at least one quantizable node: else every
    candidate equals FP32 on it by construction and its verdict says nothing (ModelError)."""
    if ctx.model is None or not targets:
        return
    name = ctx.model.output_name
    upstream = ancestor_nodes(graph.model.graph, name)
    if not upstream & {t.node for t in targets}:
        raise ModelError(f"the compared output {name} is computed before every quantizable "
                         f"node ({len(targets)} in scope): no candidate can change it, so its "
                         "verdict would say nothing", where="model.output.name", value=name,
                         fix="compare an output computed after the quantized layers (the "
                             "logits or the final embedding) with model.output.name, or widen "
                             "precision.op_types / precision.include_nodes")
