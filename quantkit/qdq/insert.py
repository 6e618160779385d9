"""Write TensorRT-style INT8 QuantizeLinear -> DequantizeLinear pairs into a graph.

For every INT8 node of a Plan (TRT_RULES.md):
- each activation input gets Q -> DQ with a per-tensor scale ``amax / 127`` (rules 1-3);
- the constant weight gets Q -> DQ with per-channel scales on the output-channel axis
  (rule 3); the weight stays a float32 initializer in front of Q (rule 8);
- biases are not quantized; outputs are not quantized (rule 4);
- every pair belongs to one consumer: a tensor read by two INT8 nodes gets two pairs (rule 7);
- a residual Add fed directly by an INT8 Conv (that Add being the Conv output's only
  reader) gets Q -> DQ on its skip input too, when the Plan has that tensor's amax (rule 6).
  :func:`residual_add_inputs` lists those tensors so the caller can calibrate them.

That is the ``tensorrt`` target. ``insert_qdq(..., target="ort_cpu")`` realizes the same
Plan for ONNX Runtime's x86 INT8 kernels (``qdq/targets.py``): uint8 asymmetric activations
(zero point from the calibrated range, ``Plan.activation_range``), the same per-channel INT8
weights, no residual-Add pairs, and ORT's own QDQ layout: one QuantizeLinear per quantized
tensor shared by its readers, one DequantizeLinear per reader, and quantized outputs where
ORT has an INT8 kernel with uint8 output (:func:`ort_cpu_output_tensors`): INT8 Conv
outputs (past a Relu / Clip), float Adds of two quantized tensors (residual Adds ->
QLinearAdd) and GlobalAveragePools of a quantized tensor. Such an output without a
calibrated range stays float (logged).

FP8 nodes of the Plan (``Precision.FP8``, target ``tensorrt`` only) go through the same writer
with FP8 E4M3 numerics (``qdq/fp8.py``, TRT_RULES.md "FP8"): opset-19 Q/DQ whose zero point is
a ``float8e4m3fn`` zero, activations per tensor with ``scale = amax / 448``, weights per
tensor (lint rule ``fp8-weight-per-channel``: per-tensor is the FP8 weight granularity
TensorRT documents for every op), as a float32 weight behind Q -> DQ or, with
``int8_weights``, as a float8e4m3fn initializer behind one DQ. INT8 nodes are written exactly
as before.

Scales and zero points are float32 / int8 (uint8 for ort_cpu activations, float8e4m3fn for
FP8 nodes) initializers.
New tensors are named
``<tensor>__q_<consumer>`` (int8), ``<tensor>__dq_<consumer>`` (float32),
``<tensor>__scale_<consumer>``, ``<tensor>__zp_<consumer>``; the :class:`QdqMap` records
which original tensor and consumer each one stands for, so nobody parses names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from quantkit.errors import GraphEditError
from quantkit.precision.plan import Plan, Precision
from quantkit.graph.facts import (TensorInfo, attr, constant_tensors, consumers, ensure_node_names,
                                node_names, quant_slots, require_qdq_opset, tensor_infos,
                                unique_name, with_value_info)
from quantkit.graph.weights import BIAS_SLOT, weight_axis
from quantkit.qdq.fp8 import FP8_DTYPE, FP8_OPSET, fp8_scale, quantize_fp8
from quantkit.qdq.scales import int8_scale, weight_amax_per_channel, quantize_weight
from quantkit.qdq.targets import DEFAULT_TARGET, Target, get_target, uint8_qparams

log = logging.getLogger(__name__)

__all__ = ["QdqEntry", "QdqMap", "insert_qdq", "residual_add_inputs",
           "ort_cpu_output_tensors"]

#: Roles of inserted tensors in a QdqMap.
ROLES = ("quantized", "dequantized", "scale", "zero_point")


@dataclass(frozen=True)
class QdqEntry:
    """An inserted tensor or node: the original tensor it stands for and the node it feeds."""

    original: str
    consumer: str
    role: str


@dataclass
class QdqMap:
    """Inserted tensor name -> QdqEntry; ``nodes`` maps inserted Q/DQ node names the same way."""

    tensors: dict[str, QdqEntry] = field(default_factory=dict)
    nodes: dict[str, QdqEntry] = field(default_factory=dict)

    def original(self, name: str) -> str:
        """The original tensor an inserted tensor stands for; any other name maps to itself."""
        entry = self.tensors.get(name)
        return entry.original if entry else name

    def consumer(self, name: str) -> str | None:
        """The node an inserted tensor feeds (None for tensors that were not inserted)."""
        entry = self.tensors.get(name)
        return entry.consumer if entry else None

    def inserted_for(self, original: str, role: str = "dequantized") -> list[str]:
        """Inserted tensors of ``role`` that stand for ``original`` (one per consumer)."""
        return [n for n, e in self.tensors.items() if e.original == original and e.role == role]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __len__(self) -> int:
        return len(self.tensors)

    def to_dict(self) -> dict:
        return {kind: {n: {"original": e.original, "consumer": e.consumer, "role": e.role}
                       for n, e in getattr(self, kind).items()}
                for kind in ("tensors", "nodes")}

    @classmethod
    def from_dict(cls, data: Mapping) -> "QdqMap":
        try:
            return cls(**{kind: {n: QdqEntry(str(e["original"]), str(e["consumer"]), str(e["role"]))
                                 for n, e in data.get(kind, {}).items()}
                          for kind in ("tensors", "nodes")})
        except (KeyError, TypeError, AttributeError) as exc:
            raise GraphEditError("malformed QdqMap data", where="QdqMap.from_dict",
                                 value=repr(exc), fix="pass the dict written by QdqMap.to_dict()"
                                 ) from None


def residual_add_inputs(model: onnx.ModelProto, plan: Plan, *,
                        infos: Mapping[str, TensorInfo] | None = None) -> list[str]:
    """Skip-branch tensors of residual Adds after INT8 Convs (rule 6), in graph order.

    Calibrate these too and put their amax into ``plan.activation_amax``; insert_qdq then
    quantizes them so TensorRT can fuse Conv + Add with INT8 I/O. Does not edit ``model``.
    """
    infos = tensor_infos(model) if infos is None else infos
    return list(dict.fromkeys(t for _, _, t in _residual_skips(model.graph, plan, infos)))


def _residual_skips(graph: onnx.GraphProto, plan: Plan,
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
                and _decision(plan, names[i]) is Precision.INT8
                and len(readers.get(t, ())) == 1 and t not in outputs)

    found = []
    for node, name in zip(nodes, names):
        if node.op_type != "Add" or len(node.input) != 2 or node.input[0] == node.input[1]:
            continue
        if _decision(plan, name) is Precision.INT8:
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
    outs, _ = _ort_cpu_fusions(model.graph, plan, infos, constant_tensors(model.graph),
                               has_range=lambda t: True)
    return list(outs)


#: single-reader activations between a Conv and its output Q that ONNX Runtime folds into
#: the uint8 Q range (ReluQuantFusion / ClipQuantFusion)
_FOLDED_ACTIVATIONS = ("Relu", "Clip")


def _ort_cpu_fusions(graph: onnx.GraphProto, plan: Plan, infos: dict[str, TensorInfo],
                     constants: dict, *, has_range) -> tuple[dict[str, tuple | None], list[str]]:
    """({quantized output tensor: (min, max) bounds of a folded Clip/Relu or None},
    [names of float Add / GlobalAveragePool nodes that read only quantized tensors])."""
    nodes = list(graph.node)
    names = node_names(graph)
    readers = consumers(graph)
    outputs = {o.name for o in graph.output}
    int8_inputs: set[str] = set()
    for node, name in zip(nodes, names):
        if _decision(plan, name) is Precision.INT8:
            slots = quant_slots(node, infos, constants)
            int8_inputs.update(node.input[s] for s in slots.activations)
    quantized: dict[str, tuple | None] = {}
    qnodes: list[str] = []

    def is_float(t: str) -> bool:
        return bool(t) and t not in constants and bool(infos.get(t)) and infos[t].is_float32

    for node, name in zip(nodes, names):
        op = node.op_type
        decision = _decision(plan, name)
        if op == "Conv" and decision is Precision.INT8 and node.output:
            t, bounds = node.output[0], None
            while t not in outputs and len(readers.get(t, ())) == 1:
                r = readers[t][0]
                b = _activation_bounds(r, constants)
                if b is None or _decision(plan, r.name) is Precision.INT8:
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


def _decision(plan: Plan, name: str) -> Precision | None:
    d = plan.decisions.get(name)
    return d.precision if d else None


def insert_qdq(model: onnx.ModelProto, plan: Plan, *,
               target: str | Target = DEFAULT_TARGET,
               infos: Mapping[str, TensorInfo] | None = None,
               int8_weights: bool = False) -> tuple[onnx.ModelProto, QdqMap]:
    """A copy of ``model`` with Q/DQ in front of every INT8 node of ``plan``, and its QdqMap.

    ``target`` (``qdq/targets.py``) chooses the realization: ``tensorrt`` (signed symmetric
    INT8 activations, TRT_RULES.md) or ``ort_cpu`` (uint8 asymmetric activations from
    ``plan.activation_range``, falling back to ``[-amax, amax]`` for a tensor without one).
    Needs opset >= 13 (per-channel axis). The result passes ``onnx.checker.check_model``.
    ``infos``: the tensor facts of ``model`` when known (``ModelGraph.infos``), else inferred.
    ``int8_weights``: store each weight as an int8 initializer behind one DequantizeLinear
    (TRT rule 8; 4x smaller) instead of the float weight behind Q -> DQ; the dequantized
    values are bit-identical (``qdq.scales.quantize_weight`` rounds as QuantizeLinear does).
    """
    where = "qdq.insert_qdq"
    tgt = get_target(target)
    require_qdq_opset(model, where=where)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    ensure_node_names(m)
    names = {n.name for n in m.graph.node}
    missing = [n for n in plan.quantized_nodes() if n not in names]
    if missing:
        raise GraphEditError("the plan's INT8 node is not in the model", where=where,
                             value=missing[0], fix="build the plan on this model (build_plan)")
    fp8_nodes = plan.nodes_with(Precision.FP8)
    if fp8_nodes and tgt.name != "tensorrt":
        raise GraphEditError(f"FP8 nodes are written for target tensorrt only, not {tgt.name}",
                             where=where, value=fp8_nodes[0],
                             fix="use target=tensorrt, or set the node to int8/fp16/fp32")
    opset = next((i.version for i in m.opset_import if i.domain in ("", "ai.onnx")), 0)
    if fp8_nodes and opset < FP8_OPSET:
        raise GraphEditError(f"FP8 Q/DQ (float8e4m3fn) needs opset {FP8_OPSET}", where=where,
                             value=f"opset {opset}", fix=f"convert the model to opset {FP8_OPSET} "
                             f"(qdq.casts.to_opset(model, {FP8_OPSET}, why=...))")
    infos = tensor_infos(m) if infos is None else infos
    constants = constant_tensors(m.graph)
    skips = _residual_skips(m.graph, plan, infos) if tgt.residual_add else []
    fused, qnodes = (_ort_cpu_fusions(m.graph, plan, infos, constants,
                                      has_range=lambda t: t in plan.activation_amax)
                     if tgt.fuse_outputs else ({}, []))
    if tgt.fuse_outputs:
        _log_unfused_outputs(m, plan, infos, constants, fused)
    proto_nodes = {n.name: n for n in m.graph.node}

    graph = gs.import_onnx(m)
    editor = _Editor(graph, share_activation_q=tgt.fuse_outputs)
    for node in list(graph.nodes):
        decision = _decision(plan, node.name)
        if decision is Precision.FP8:
            _quantize_fp8_node(editor, node, proto_nodes[node.name], plan, infos, constants,
                               int8_weights=int8_weights)
            continue
        if decision is not Precision.INT8:
            continue
        proto = proto_nodes[node.name]
        slots = quant_slots(proto, infos, constants)
        for t in dict.fromkeys(proto.input[s] for s in slots.activations):
            if t not in plan.activation_amax:
                raise GraphEditError(f"INT8 node {node.name} reads {t}, which has no amax",
                                     where=where, value=t,
                                     fix="calibrate the tensor or set the node to fp16/fp32 "
                                         "(Plan.with_precision)")
            editor.quantize(node, t, *_activation_qparams(plan, t, tgt, fused.get(t)))
        if slots.weight is not None:
            t = proto.input[slots.weight]
            w = numpy_helper.to_array(constants[t])
            axis = weight_axis(proto.op_type, w.ndim, {"transB": attr(proto, "transB", 0)})
            w_scale = int8_scale(weight_amax_per_channel(w, axis), where=f"weight {t}")
            if int8_weights:  # rule 8: pre-quantized int8 initializer behind one DQ
                editor.dequantize_constant(node, t, quantize_weight(w, w_scale, axis), w_scale,
                                           axis=axis)
            else:
                editor.quantize(node, t, w_scale, axis=axis)
            if tgt.quantize_bias:
                _quantize_bias(editor, node, proto, slots, plan, tgt, constants, w_scale,
                               fused)
        for slot in slots.constants:
            t = proto.input[slot]
            w = numpy_helper.to_array(constants[t])
            editor.quantize(node, t, int8_scale(float(np.max(np.abs(w), initial=0.0)),
                                                where=f"constant {t}"))
    by_name = {n.name: n for n in graph.nodes}
    if tgt.fuse_outputs:
        _quantize_outputs(editor, graph, plan, tgt, fused, [by_name[n] for n in qnodes])
    for add_name, _slot, t in skips:
        if t in plan.activation_amax:
            editor.quantize(by_name[add_name], t,
                            int8_scale(plan.activation_amax[t], where=f"amax[{t!r}]"))
        else:
            log.info("residual Add %s: no amax for skip input %s; left unquantized "
                     "(calibrate residual_add_inputs() to quantize it)", add_name, t)

    graph.cleanup().toposort()
    out = gs.export_onnx(graph)
    _copy_model_fields(model, out)
    out = with_value_info(out)
    try:
        onnx.checker.check_model(out)
    except onnx.checker.ValidationError as exc:
        raise GraphEditError(f"Q/DQ graph fails onnx.checker: {str(exc).splitlines()[0]}",
                             where=where, fix="report this with the model; the input model "
                                              "should pass onnx.checker first") from exc
    log.info("inserted %d Q/DQ pairs for %d INT8 nodes (target %s)", editor.pairs,
             len(plan.int8_nodes()), tgt.name)
    if fp8_nodes:
        log.info("of which FP8 E4M3 nodes: %d", len(fp8_nodes))
    return out, editor.qmap


def _quantize_fp8_node(editor: "_Editor", node: gs.Node, proto: onnx.NodeProto, plan: Plan,
                       infos, constants: dict, *, int8_weights: bool) -> None:
    """Q/DQ with FP8 E4M3 numerics on every input of one FP8 node: activations per tensor
    (``amax / 448``), the weight and other constant inputs per tensor."""
    zero = np.zeros((), dtype=FP8_DTYPE)
    slots = quant_slots(proto, infos, constants)
    for t in dict.fromkeys(proto.input[s] for s in slots.activations):
        if t not in plan.activation_amax and t not in plan.fp8_amax:
            raise GraphEditError(f"FP8 node {node.name} reads {t}, which has no amax",
                                 where="qdq.insert_qdq", value=t,
                                 fix="calibrate the tensor or set the node to fp16/fp32 "
                                     "(Plan.with_precision)")
        editor.quantize(node, t, fp8_scale(plan.fp8_amax_of(t), where=f"amax[{t!r}]"), zero)
    weight = [slots.weight] if slots.weight is not None else []
    for slot in weight + list(slots.constants):
        t = proto.input[slot]
        w = numpy_helper.to_array(constants[t])
        scale = fp8_scale(float(np.max(np.abs(w), initial=0.0)), where=f"weight {t}")
        if int8_weights and slot in weight:  # FP8 initializer behind one DQ (4x smaller)
            editor.dequantize_constant(node, t, quantize_fp8(w, scale), scale)
        else:
            editor.quantize(node, t, scale, zero)


def _quantize_bias(editor: "_Editor", node: gs.Node, proto: onnx.NodeProto, slots, plan: Plan,
                   tgt: Target, constants: dict, w_scale: np.ndarray,
                   fused: Mapping[str, tuple | None]) -> None:
    """ort_cpu: the float bias of a Conv / Gemm becomes int32 behind a DequantizeLinear with
    scale ``activation scale x weight scale`` (per output channel, zero point 0), as ONNX
    Runtime's QLinearConv / QGemm fusions require; TensorRT keeps float biases (rule 4)."""
    slot = BIAS_SLOT.get(proto.op_type)
    if slot is None or len(proto.input) <= slot or not proto.input[slot] \
            or proto.input[slot] not in constants or len(slots.activations) != 1:
        return
    b_name = proto.input[slot]
    b = numpy_helper.to_array(constants[b_name]).astype(np.float64)
    x = proto.input[slots.activations[0]]
    x_scale, _ = _activation_qparams(plan, x, tgt, fused.get(x))  # the scale its Q really has
    scale = (np.float64(x_scale) * w_scale.astype(np.float64)).reshape(-1)
    if b.ndim != 1 or scale.size not in (1, b.size):
        return
    q = np.clip(np.rint(b / scale), np.iinfo(np.int32).min, np.iinfo(np.int32).max)
    editor.dequantize_constant(node, b_name, q.astype(np.int32), scale.astype(np.float32),
                               axis=0 if scale.size > 1 else None)


def _activation_qparams(plan: Plan, t: str, tgt: Target,
                        bounds: tuple[float, float] | None = None
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """(scale, zero point or None for int8 zero) of activation ``t`` for ``tgt``;
    ``bounds``: the [min, max] of a Clip / Relu ORT should fold into the uint8 Q."""
    amax = plan.activation_amax[t]
    if tgt.activation_dtype == "uint8":
        lo, hi = plan.activation_range.get(t, (None, None))
        return uint8_qparams(amax, lo, hi, bounds=bounds, where=f"amax[{t!r}]")
    return int8_scale(amax, where=f"amax[{t!r}]"), None


def _quantize_outputs(editor: "_Editor", graph: gs.Graph, plan: Plan, tgt: Target,
                      fused: Mapping[str, tuple | None], qnodes: list[gs.Node]) -> None:
    """ort_cpu: every reader of a fused output reads it through its own DQ of the tensor's
    one Q; quantized Adds / GlobalAveragePools read all their inputs through DQs."""
    inserted = set(editor.qmap.nodes)
    readers: dict[str, list[gs.Node]] = {}
    for n in graph.nodes:
        if n.name in inserted:
            continue
        for t in dict.fromkeys(i.name for i in n.inputs):
            readers.setdefault(t, []).append(n)
    for t, bounds in fused.items():
        for r in readers.get(t, []):
            editor.quantize(r, t, *_activation_qparams(plan, t, tgt, bounds))
    for n in qnodes:
        for t in dict.fromkeys(i.name for i in n.inputs):
            if t in plan.activation_amax and t not in fused:
                editor.quantize(n, t, *_activation_qparams(plan, t, tgt))


def _log_unfused_outputs(m: onnx.ModelProto, plan: Plan, infos, constants,
                         fused: Mapping[str, tuple | None]) -> None:
    missing = [t for t in _ort_cpu_fusions(m.graph, plan, infos, constants,
                                           has_range=lambda t: True)[0] if t not in fused]
    if missing:
        log.info("target ort_cpu: %d quantizable outputs have no calibrated range and stay "
                 "float (their producers run as float kernels): %s", len(missing),
                 ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else ""))


def _copy_model_fields(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    dst.ir_version = src.ir_version
    dst.producer_name, dst.producer_version = src.producer_name, src.producer_version
    dst.domain, dst.model_version, dst.doc_string = src.domain, src.model_version, src.doc_string
    del dst.metadata_props[:]
    dst.metadata_props.extend(src.metadata_props)
    have = {i.domain for i in dst.opset_import}
    dst.opset_import.extend(i for i in src.opset_import if i.domain not in have)


class _Editor:
    """Adds Q -> DQ pairs with unique, deterministic names and records them in a QdqMap."""

    def __init__(self, graph: gs.Graph, *, share_activation_q: bool = False) -> None:
        self.graph = graph
        self.tensors = graph.tensors()
        self.taken_tensors = set(self.tensors)
        self.taken_nodes = {n.name for n in graph.nodes}
        self.qmap = QdqMap()
        self.pairs = 0
        #: ort_cpu: one Q per activation tensor (tensor -> (q_out, scale, zero point))
        self.share_activation_q = share_activation_q
        self.shared_q: dict[str, tuple[gs.Variable, gs.Constant, gs.Constant]] = {}

    _unique = staticmethod(unique_name)

    def quantize(self, consumer: gs.Node, tensor_name: str, scale: np.ndarray,
                 zero_point: np.ndarray | None = None, *, axis: int | None = None) -> None:
        """Route every read of ``tensor_name`` by ``consumer`` through one new Q -> DQ pair.

        ``zero_point``: its dtype is the quantized type (default: int8 zeros, TensorRT).
        With ``share_activation_q`` an activation (non-constant) tensor gets one Q, made for
        its first consumer (the QdqMap names that one), and each consumer its own DQ.
        """
        src = self.tensors[tensor_name]
        slots = [i for i, t in enumerate(consumer.inputs) if t.name == tensor_name]
        if not slots:
            raise GraphEditError("node does not read the tensor to quantize",
                                 where=f"qdq.insert_qdq node {consumer.name}", value=tensor_name,
                                 fix="report this; the plan and graph disagree")
        c = consumer.name
        tn, nn = self.taken_tensors, self.taken_nodes
        share = self.share_activation_q and not isinstance(src, gs.Constant) and axis is None
        if share and tensor_name in self.shared_q:
            q_out, scale_c, zp_c = self.shared_q[tensor_name]
            if not (np.array_equal(scale_c.values, np.asarray(scale, dtype=np.float32))
                    and zero_point is not None and np.array_equal(zp_c.values, zero_point)):
                raise GraphEditError("two quantizations of one tensor disagree",
                                     where=f"qdq.insert_qdq node {c}", value=tensor_name,
                                     fix="report this; one tensor has one range")
            self._dequantize(consumer, c, tensor_name, src, q_out, scale_c, zp_c, {}, slots)
            return
        scale_c = gs.Constant(self._unique(f"{tensor_name}__scale_{c}", tn),
                              np.array(scale, dtype=np.float32))
        zp = (np.zeros(np.shape(scale), dtype=np.int8) if zero_point is None
              else np.asarray(zero_point))
        zp_c = gs.Constant(self._unique(f"{tensor_name}__zp_{c}", tn), zp)
        q_out = gs.Variable(self._unique(f"{tensor_name}__q_{c}", tn), dtype=zp.dtype,
                            shape=src.shape)
        dq_out = gs.Variable(self._unique(f"{tensor_name}__dq_{c}", tn), dtype=np.float32,
                             shape=src.shape)
        attrs = {"axis": int(axis)} if axis is not None else {}
        q = gs.Node("QuantizeLinear", self._unique(f"{tensor_name}__QuantizeLinear_{c}", nn),
                    dict(attrs), [src, scale_c, zp_c], [q_out])
        dq = gs.Node("DequantizeLinear", self._unique(f"{tensor_name}__DequantizeLinear_{c}", nn),
                     dict(attrs), [q_out, scale_c, zp_c], [dq_out])
        for i in slots:
            consumer.inputs[i] = dq_out
        self.graph.nodes.extend([q, dq])
        for t, role in ((q_out, "quantized"), (dq_out, "dequantized"), (scale_c, "scale"),
                        (zp_c, "zero_point")):
            self.tensors[t.name] = t
            self.qmap.tensors[t.name] = QdqEntry(tensor_name, c, role)
        self.qmap.nodes[q.name] = QdqEntry(tensor_name, c, "quantize")
        self.qmap.nodes[dq.name] = QdqEntry(tensor_name, c, "dequantize")
        self.pairs += 1
        if share:
            self.shared_q[tensor_name] = (q_out, scale_c, zp_c)

    def _dequantize(self, consumer: gs.Node, c: str, tensor_name: str, src, q_out, scale_c,
                    zp_c, attrs: dict, slots: list[int]) -> None:
        """Another DQ of a shared ``q_out`` for ``consumer``, rerouting its reads."""
        dq_out = gs.Variable(self._unique(f"{tensor_name}__dq_{c}", self.taken_tensors),
                             dtype=np.float32, shape=src.shape)
        dq = gs.Node("DequantizeLinear",
                     self._unique(f"{tensor_name}__DequantizeLinear_{c}", self.taken_nodes),
                     dict(attrs), [q_out, scale_c, zp_c], [dq_out])
        for i in slots:
            consumer.inputs[i] = dq_out
        self.graph.nodes.append(dq)
        self.tensors[dq_out.name] = dq_out
        self.qmap.tensors[dq_out.name] = QdqEntry(tensor_name, c, "dequantized")
        self.qmap.nodes[dq.name] = QdqEntry(tensor_name, c, "dequantize")
        self.pairs += 1

    def dequantize_constant(self, consumer: gs.Node, tensor_name: str, data: np.ndarray,
                            scale: np.ndarray, axis: int | None = None) -> None:
        """Replace ``consumer``'s reads of constant ``tensor_name`` by DQ(``data``): the
        pre-quantized constant (e.g. an int32 bias) behind one DequantizeLinear."""
        slots = [i for i, t in enumerate(consumer.inputs) if t.name == tensor_name]
        c = consumer.name
        tn, nn = self.taken_tensors, self.taken_nodes
        data_c = gs.Constant(self._unique(f"{tensor_name}__q_{c}", tn), np.asarray(data))
        scale_c = gs.Constant(self._unique(f"{tensor_name}__scale_{c}", tn),
                              np.asarray(scale, dtype=np.float32))
        zp_c = gs.Constant(self._unique(f"{tensor_name}__zp_{c}", tn),
                           np.zeros(np.shape(scale), dtype=np.asarray(data).dtype))
        dq_out = gs.Variable(self._unique(f"{tensor_name}__dq_{c}", tn), dtype=np.float32,
                             shape=self.tensors[tensor_name].shape)
        attrs = {"axis": int(axis)} if axis is not None else {}
        dq = gs.Node("DequantizeLinear", self._unique(f"{tensor_name}__DequantizeLinear_{c}", nn),
                     attrs, [data_c, scale_c, zp_c], [dq_out])
        for i in slots:
            consumer.inputs[i] = dq_out
        self.graph.nodes.append(dq)
        for t, role in ((data_c, "quantized"), (dq_out, "dequantized"), (scale_c, "scale"),
                        (zp_c, "zero_point")):
            self.tensors[t.name] = t
            self.qmap.tensors[t.name] = QdqEntry(tensor_name, c, role)
        self.qmap.nodes[dq.name] = QdqEntry(tensor_name, c, "dequantize")
