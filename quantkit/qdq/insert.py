"""Write TensorRT-style INT8 QuantizeLinear -> DequantizeLinear pairs into a graph.

For every INT8 node of a Plan (TRT_RULES.md):
- each activation input gets Q -> DQ with a per-tensor scale ``amax / 127`` (rules 1-3);
- the constant weight gets Q -> DQ with per-channel scales on the output-channel axis
  (rule 3); the weight stays a float32 initializer in front of Q (rule 8);
- biases are not quantized; outputs are not quantized (rule 4);
- every pair belongs to one consumer: a tensor read by two INT8 nodes gets two pairs (rule 7);
- a residual Add fed directly by an INT8 Conv (that Add being the Conv output's only
  reader) gets Q -> DQ on its skip input too, when the Plan has that tensor's amax (rule 6).
  :func:`quantkit.qdq.placement.residual_add_inputs` lists those tensors so the caller can
  calibrate them.

That is the ``tensorrt`` target. ``insert_qdq(..., target="ort_cpu")`` realizes the same
Plan for ONNX Runtime's x86 INT8 kernels (``qdq/targets.py``): uint8 asymmetric activations
(zero point from the calibrated range, ``Plan.activation_range``), the same per-channel INT8
weights, no residual-Add pairs, and ORT's own QDQ layout: one QuantizeLinear per quantized
tensor shared by its readers, one DequantizeLinear per reader, and quantized outputs where
ORT has an INT8 kernel with uint8 output (:func:`quantkit.qdq.placement.ort_cpu_output_tensors`): INT8 Conv
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
``<tensor>__scale_<consumer>``, ``<tensor>__zp_<consumer>``; the :class:`~quantkit.qdq.qdq_map.QdqMap` records
which original tensor and consumer each one stands for, so nobody parses names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from quantkit.errors import GraphEditError, first_line
from quantkit.precision.plan import Plan, Precision
from quantkit.graph.facts import (TensorInfo, attr, check_structure, constant_tensors,
                                  ensure_node_names, quant_slots, require_qdq_opset,
                                  tensor_infos, unique_name, with_value_info)
from quantkit.graph.weights import BIAS_SLOT, weight_axis
from quantkit.qdq.fp8 import FP8_DTYPE, FP8_OPSET, fp8_scale, fp8_weight_scale, quantize_fp8
from quantkit.qdq.placement import decision_of, ort_cpu_fusions, residual_skips
from quantkit.qdq.qdq_map import QdqEntry, QdqMap
from quantkit.qdq.scales import int8_scale, weight_amax_per_channel, quantize_weight
from quantkit.qdq.targets import DEFAULT_TARGET, Target, get_target, uint8_qparams

log = logging.getLogger(__name__)

__all__ = ["insert_qdq"]


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
    skips = residual_skips(m.graph, plan, infos) if tgt.residual_add else []
    fused, qnodes = (ort_cpu_fusions(m.graph, plan, infos, constants,
                                      has_range=lambda t: t in plan.activation_amax)
                     if tgt.fuse_outputs else ({}, []))
    if tgt.fuse_outputs:
        _log_unfused_outputs(m, plan, infos, constants, fused)
    proto_nodes = {n.name: n for n in m.graph.node}

    graph = gs.import_onnx(m)
    editor = _Editor(graph, share_activation_q=tgt.fuse_outputs)
    for node in list(graph.nodes):
        decision = decision_of(plan, node.name)
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
        check_structure(out)
    except onnx.checker.ValidationError as exc:
        raise GraphEditError(f"Q/DQ graph fails onnx.checker: {first_line(exc)}",
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
        scale = fp8_weight_scale(w, where=f"weight {t}")
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
    missing = [t for t in ort_cpu_fusions(m.graph, plan, infos, constants,
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
