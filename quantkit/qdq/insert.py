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

Scales and zero points are float32 / int8 initializers. New tensors are named
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
from quantkit.qdq.graph import (TensorInfo, attr, constant_tensors, consumers, ensure_node_names,
                                node_names, quant_slots, require_qdq_opset, tensor_infos,
                                unique_name, with_value_info)
from quantkit.qdq.scales import int8_scale, per_channel_amax, weight_axis

log = logging.getLogger(__name__)

__all__ = ["QdqEntry", "QdqMap", "insert_qdq", "residual_add_inputs"]

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


def residual_add_inputs(model: onnx.ModelProto, plan: Plan) -> list[str]:
    """Skip-branch tensors of residual Adds after INT8 Convs (rule 6), in graph order.

    Calibrate these too and put their amax into ``plan.activation_amax``; insert_qdq then
    quantizes them so TensorRT can fuse Conv + Add with INT8 I/O. Does not edit ``model``.
    """
    infos = tensor_infos(model)
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


def _broadcasts(sa: tuple | None, sb: tuple | None) -> bool:
    """True if the shapes differ in rank or in a dimension known on both sides."""
    if sa is None or sb is None:
        return False
    return len(sa) != len(sb) or any(x is not None and y is not None and x != y
                                     for x, y in zip(sa, sb))


def _decision(plan: Plan, name: str) -> Precision | None:
    d = plan.decisions.get(name)
    return d.precision if d else None


def insert_qdq(model: onnx.ModelProto, plan: Plan) -> tuple[onnx.ModelProto, QdqMap]:
    """A copy of ``model`` with Q/DQ in front of every INT8 node of ``plan``, and its QdqMap.

    Needs opset >= 13 (per-channel axis). The result passes ``onnx.checker.check_model``.
    """
    where = "qdq.insert_qdq"
    require_qdq_opset(model, where=where)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    ensure_node_names(m)
    names = {n.name for n in m.graph.node}
    missing = [n for n in plan.int8_nodes() if n not in names]
    if missing:
        raise GraphEditError("the plan's INT8 node is not in the model", where=where,
                             value=missing[0], fix="build the plan on this model (build_plan)")
    infos = tensor_infos(m)
    constants = constant_tensors(m.graph)
    skips = _residual_skips(m.graph, plan, infos)
    proto_nodes = {n.name: n for n in m.graph.node}

    graph = gs.import_onnx(m)
    editor = _Editor(graph)
    for node in list(graph.nodes):
        if _decision(plan, node.name) is not Precision.INT8:
            continue
        proto = proto_nodes[node.name]
        slots = quant_slots(proto, infos, constants)
        for t in dict.fromkeys(proto.input[s] for s in slots.activations):
            if t not in plan.activation_amax:
                raise GraphEditError(f"INT8 node {node.name} reads {t}, which has no amax",
                                     where=where, value=t,
                                     fix="calibrate the tensor or set the node to fp16/fp32 "
                                         "(Plan.with_precision)")
            editor.quantize(node, t, int8_scale(plan.activation_amax[t], where=f"amax[{t!r}]"))
        if slots.weight is not None:
            t = proto.input[slots.weight]
            w = numpy_helper.to_array(constants[t])
            axis = weight_axis(proto.op_type, w.ndim, trans_b=int(attr(proto, "transB", 0)))
            editor.quantize(node, t, int8_scale(per_channel_amax(w, axis), where=f"weight {t}"),
                            axis=axis)
        for slot in slots.constants:
            t = proto.input[slot]
            w = numpy_helper.to_array(constants[t])
            editor.quantize(node, t, int8_scale(float(np.max(np.abs(w), initial=0.0)),
                                                where=f"constant {t}"))
    by_name = {n.name: n for n in graph.nodes}
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
    log.info("inserted %d Q/DQ pairs for %d INT8 nodes", editor.pairs, len(plan.int8_nodes()))
    return out, editor.qmap


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

    def __init__(self, graph: gs.Graph) -> None:
        self.graph = graph
        self.tensors = graph.tensors()
        self.taken_tensors = set(self.tensors)
        self.taken_nodes = {n.name for n in graph.nodes}
        self.qmap = QdqMap()
        self.pairs = 0

    _unique = staticmethod(unique_name)

    def quantize(self, consumer: gs.Node, tensor_name: str, scale: np.ndarray,
                 axis: int | None = None) -> None:
        """Route every read of ``tensor_name`` by ``consumer`` through one new Q -> DQ pair."""
        src = self.tensors[tensor_name]
        slots = [i for i, t in enumerate(consumer.inputs) if t.name == tensor_name]
        if not slots:
            raise GraphEditError("node does not read the tensor to quantize",
                                 where=f"qdq.insert_qdq node {consumer.name}", value=tensor_name,
                                 fix="report this; the plan and graph disagree")
        c = consumer.name
        tn, nn = self.taken_tensors, self.taken_nodes
        scale_c = gs.Constant(self._unique(f"{tensor_name}__scale_{c}", tn),
                              np.array(scale, dtype=np.float32))
        zp_c = gs.Constant(self._unique(f"{tensor_name}__zp_{c}", tn),
                           np.zeros(scale.shape, dtype=np.int8))
        q_out = gs.Variable(self._unique(f"{tensor_name}__q_{c}", tn), dtype=np.int8,
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
