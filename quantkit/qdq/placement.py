"""Where Q/DQ goes beyond an INT8 node's own inputs: TensorRT's residual-Add skip inputs
(rule 6) and, for the ort_cpu target, the outputs ONNX Runtime fuses into uint8 kernels."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import onnx
from onnx import numpy_helper

from quantkit.graph.facts import (TensorInfo, attr, constant_tensors, consumers, node_names,
                                  quant_slots, tensor_infos)
from quantkit.precision.plan import Plan, Precision

__all__ = ["residual_add_inputs", "ort_cpu_output_tensors", "residual_skips", "ort_cpu_fusions",
           "decision_of"]

log = logging.getLogger(__name__)


def residual_add_inputs(model: onnx.ModelProto, plan: Plan, *,
                        infos: Mapping[str, TensorInfo] | None = None) -> list[str]:
    """Skip-branch tensors of residual Adds after INT8 Convs (rule 6), in graph order.

    Calibrate these too and put their amax into ``plan.activation_amax``; insert_qdq then
    quantizes them so TensorRT can fuse Conv + Add with INT8 I/O. Does not edit ``model``.
    """
    infos = tensor_infos(model) if infos is None else infos
    return list(dict.fromkeys(t for _, _, t in residual_skips(model.graph, plan, infos)))


def residual_skips(graph: onnx.GraphProto, plan: Plan,
                    infos: dict[str, TensorInfo]) -> list[tuple[str, int, str]]:
    """(add node name, skip slot, skip tensor) for each residual Add after an INT8 Conv."""
    nodes = list(graph.node)
    names = node_names(graph)
    prod = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    readers = consumers(graph)
    outputs = {o.name for o in graph.output}
    constants = constant_tensors(graph)

    def int8_conv_output(t: str) -> bool:
        i = prod.get(t)
        return (i is not None and nodes[i].op_type == "Conv"
                and decision_of(plan, names[i]) is Precision.INT8
                and len(readers.get(t, ())) == 1 and t not in outputs)

    found = []
    for node, name in zip(nodes, names):
        if node.op_type != "Add" or len(node.input) != 2 or node.input[0] == node.input[1]:
            continue
        if decision_of(plan, name) is Precision.INT8:
            continue  # an INT8 Add already gets Q/DQ on both inputs
        a, b = node.input
        if any(t in constants or not (infos.get(t) and infos[t].is_float32) for t in (a, b)):
            continue
        if _broadcasts(infos[a].shape, infos[b].shape):
            continue  # a broadcast Add is no residual connection
        for conv_slot in (0, 1):
            if int8_conv_output(node.input[conv_slot]):
                skip_slot = 1 - conv_slot
                found.append((name, skip_slot, node.input[skip_slot]))
                break
    return found


def ort_cpu_output_tensors(model: onnx.ModelProto, plan: Plan, *,
                           infos: Mapping[str, TensorInfo] | None = None) -> list[str]:
    """Outputs target ort_cpu quantizes (so they need a calibrated range), in graph order.

    INT8 Conv outputs (past a single-reader Relu / Clip with constant bounds), outputs of
    float Adds whose two inputs are quantized (residual Adds: QLinearAdd) and of
    GlobalAveragePools of a quantized tensor (QLinearGlobalAveragePool); never graph
    outputs. Every reader of such a tensor reads it through a DQ, also a layer the Plan
    keeps float (as in ONNX Runtime's own QDQ models): its INT8 producer still runs as
    QLinearConv, and the float layer computes in float32 on the uint8 values (an INT8 Conv
    with float output does not exist on ORT CPU, so the alternative would be a float Conv).
    Calibrate these for target ort_cpu and put their amax / min / max into the Plan.
    Does not edit ``model``.
    """
    infos = tensor_infos(model) if infos is None else infos
    outs, _ = ort_cpu_fusions(model.graph, plan, infos, constant_tensors(model.graph),
                               has_range=lambda t: True)
    return list(outs)


#: single-reader activations between a Conv and its output Q that ONNX Runtime folds into
#: the uint8 Q range (ReluQuantFusion / ClipQuantFusion)
_FOLDED_ACTIVATIONS = ("Relu", "Clip")


def ort_cpu_fusions(graph: onnx.GraphProto, plan: Plan, infos: dict[str, TensorInfo],
                     constants: dict, *, has_range) -> tuple[dict[str, tuple | None], list[str]]:
    """({quantized output tensor: (min, max) bounds of a folded Clip/Relu or None},
    [names of float Add / GlobalAveragePool nodes that read only quantized tensors])."""
    nodes = list(graph.node)
    names = node_names(graph)
    readers = consumers(graph)
    outputs = {o.name for o in graph.output}
    int8_inputs: set[str] = set()
    for node, name in zip(nodes, names):
        if decision_of(plan, name) is Precision.INT8:
            slots = quant_slots(node, infos, constants)
            int8_inputs.update(node.input[s] for s in slots.activations)
    quantized: dict[str, tuple | None] = {}
    qnodes: list[str] = []

    def is_float(t: str) -> bool:
        return bool(t) and t not in constants and bool(infos.get(t)) and infos[t].is_float32

    for node, name in zip(nodes, names):
        op = node.op_type
        decision = decision_of(plan, name)
        if op == "Conv" and decision is Precision.INT8 and node.output:
            t, bounds = node.output[0], None
            while t not in outputs and len(readers.get(t, ())) == 1:
                r = readers[t][0]
                b = _activation_bounds(r, constants)
                if b is None or decision_of(plan, r.name) is Precision.INT8:
                    break
                t, bounds = r.output[0], (b if bounds is None else
                                          (max(bounds[0], b[0]), min(bounds[1], b[1])))
            if t not in outputs and readers.get(t) and is_float(t) and has_range(t):
                quantized[t] = bounds
        elif op == "Add" and decision is not Precision.INT8 and len(node.input) == 2 \
                and node.output and node.input[0] != node.input[1]:
            a, b = node.input
            if not (is_float(a) and is_float(b)) or _broadcasts(infos[a].shape, infos[b].shape):
                continue
            known = quantized.keys() | int8_inputs
            y = node.output[0]
            if (a in known and b in known and (a in quantized or b in quantized)
                    and has_range(a) and has_range(b) and y not in outputs and readers.get(y)
                    and is_float(y) and has_range(y)):
                quantized[y] = None
                qnodes.append(name)
        elif op == "GlobalAveragePool" and decision is not Precision.INT8 and node.input \
                and node.input[0] in quantized and node.output:
            y = node.output[0]
            if y not in outputs and readers.get(y) and is_float(y) and has_range(y):
                quantized[y] = None
                qnodes.append(name)
    return quantized, qnodes


def _activation_bounds(node: onnx.NodeProto, constants: dict) -> tuple[float, float] | None:
    """[min, max] of a Relu or of a Clip with constant (or absent) bounds; else None."""
    if node.op_type not in _FOLDED_ACTIVATIONS or len(node.output) != 1:
        return None
    if node.op_type == "Relu":
        return (0.0, float("inf"))
    if node.domain not in ("", "ai.onnx"):
        return None
    lo, hi = float("-inf"), float("inf")
    if len(node.input) == 1 or not any(node.input[1:]):  # opset < 11: min / max attributes
        lo, hi = float(attr(node, "min", lo)), float(attr(node, "max", hi))
    for slot in (1, 2):
        t = node.input[slot] if len(node.input) > slot else ""
        if not t:
            continue
        if t not in constants:
            return None
        v = numpy_helper.to_array(constants[t])
        if v.size != 1:
            return None
        if slot == 1:
            lo = float(v.reshape(-1)[0])
        else:
            hi = float(v.reshape(-1)[0])
    return (lo, hi)


def _broadcasts(sa: tuple | None, sb: tuple | None) -> bool:
    """True if the shapes differ in rank or in a dimension known on both sides."""
    if sa is None or sb is None:
        return False
    return len(sa) != len(sb) or any(x is not None and y is not None and x != y
                                     for x, y in zip(sa, sb))


def decision_of(plan: Plan, name: str) -> Precision | None:
    d = plan.decisions.get(name)
    return d.precision if d else None
