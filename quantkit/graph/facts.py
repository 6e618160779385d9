"""Read-only facts about an ONNX graph that planning, Q/DQ insertion, casting and lint share.

Bottom layer: imports onnx, numpy and quantkit.errors / quantkit.graph only.

Everything here works on the ``onnx`` protobuf and never edits it, except
:func:`ensure_node_names`, which only fills in node names.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from quantkit.errors import GraphEditError, first_line
from quantkit.graph.weights import BIAS_SLOT, WEIGHT_SLOT

log = logging.getLogger(__name__)

FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16

#: Lowest default-domain opset whose QuantizeLinear / DequantizeLinear take a per-channel axis.
MIN_QDQ_OPSET = 13


def node_names(graph: onnx.GraphProto) -> list[str]:
    """A unique, deterministic name for every node of ``graph``, in graph order.

    Named nodes keep their name (the first of duplicates keeps it); an unnamed or duplicate
    node gets ``<op_type>_<index>`` (plus ``_<k>`` if that is taken). The same graph always
    gives the same names, so a copy of a model names its nodes exactly like the original.
    """
    taken = {n.name for n in graph.node if n.name}
    seen: set[str] = set()
    names = []
    for i, node in enumerate(graph.node):
        name = node.name
        if not name or name in seen:
            base = f"{node.op_type}_{i}"
            name, k = base, 0
            while name in taken or name in seen:
                k += 1
                name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names


def ensure_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every node of ``model``'s main graph a unique name (in place; returns ``model``).

    Idempotent: a model whose nodes already have unique names is unchanged. See
    :func:`node_names` for the scheme.
    """
    renamed = 0
    for node, name in zip(model.graph.node, node_names(model.graph)):
        if node.name != name:
            node.name = name
            renamed += 1
    if renamed:
        log.info("named %d unnamed or duplicate nodes (<op_type>_<index>)", renamed)
    return model


def opset_version(model: onnx.ModelProto) -> int:
    """The model's default-domain (ai.onnx) opset version."""
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    raise GraphEditError("model imports no default-domain (ai.onnx) opset",
                         where="model.opset_import", value=[i.domain for i in model.opset_import],
                         fix="re-export the model with a standard ONNX opset")


def require_qdq_opset(model: onnx.ModelProto, *, where: str) -> int:
    """The default-domain opset, or GraphEditError if it is too old for per-channel Q/DQ."""
    version = opset_version(model)
    if version < MIN_QDQ_OPSET:
        raise GraphEditError(
            f"opset {version} has no per-channel QuantizeLinear/DequantizeLinear "
            f"(needs opset >= {MIN_QDQ_OPSET})", where=where, value=version,
            fix="re-export the model at opset 13 or newer (e.g. torch.onnx.export(..., "
                "opset_version=17)) or convert it with onnx.version_converter.convert_version")
    return version


def constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Tensors whose values are known at build time: initializers and Constant outputs.

    Initializers that are also graph inputs (old IR) can be overridden at run time and are
    not constants.
    """
    inputs = {i.name for i in graph.input}
    out = {t.name: t for t in graph.initializer if t.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                    out[node.output[0]] = attr.t
    return out


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_float":
            return np.asarray(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.asarray(list(attr.floats), dtype=np.float32)
        if attr.name == "value_int":
            return np.asarray(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.asarray(list(attr.ints), dtype=np.int64)
    return None


def constant_arrays(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Every build-time constant of ``graph`` as numpy (initializers and Constant nodes)."""
    inputs = {i.name for i in graph.input}
    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            value = _constant_node_value(node)
            if value is not None:
                out[node.output[0]] = value
    return out


@dataclass(frozen=True)
class TensorInfo:
    """Element type (onnx.TensorProto enum, 0 if unknown) and shape (None dims unknown)."""

    elem_type: int
    shape: tuple[int | None, ...] | None

    @property
    def is_float32(self) -> bool:
        return self.elem_type == FLOAT


#: initializer element types whose values shape inference may read (shape vectors, axes,
#: indices): :func:`shape_skeleton` keeps them, and every initializer of at most
#: :data:`_SKELETON_KEEP_ELEMENTS` elements
_SKELETON_KEEP_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})
_SKELETON_KEEP_ELEMENTS = 16


def _copy_fields(src, dst, skip: str) -> None:
    """Every set field of protobuf message ``src`` but ``skip`` into the empty ``dst``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        target = getattr(dst, field.name)
        if isinstance(value, (bytes, str, int, float)):
            setattr(dst, field.name, value)
        elif hasattr(target, "extend"):
            target.extend(value)
        else:
            target.CopyFrom(value)


def _weightless(t: onnx.TensorProto) -> bool:
    """An initializer whose values a skeleton drops (:func:`shape_skeleton`)."""
    return not (t.data_type in _SKELETON_KEEP_TYPES
                or int(np.prod(t.dims, dtype=np.int64)) <= _SKELETON_KEEP_ELEMENTS
                or t.data_location == onnx.TensorProto.EXTERNAL)


def check_structure(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_model`` on a weightless copy of ``model``: every node against
    its op schema, names, types, opsets and IR rules, as on the model itself, with the
    large float initializers passed as typed graph inputs instead (their values are what
    the checker would otherwise copy into C++: 0.14 s per call on a 90 MB encoder, 0.01 s
    here). The one check given up is that each weight's bytes match its dims, which
    ``numpy_helper.from_array`` guarantees for every initializer quantkit writes.
    Raises ``onnx.checker.ValidationError`` like the checker."""
    sk = onnx.ModelProto()
    _copy_fields(model, sk, skip="graph")
    _copy_fields(model.graph, sk.graph, skip="initializer")
    inputs = {i.name for i in sk.graph.input}
    for t in model.graph.initializer:
        if not _weightless(t):
            sk.graph.initializer.append(t)
        elif t.name not in inputs:
            sk.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                     list(t.dims)))
    onnx.checker.check_model(sk)


def shape_skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` without the values of its large non-integer initializers (names, types and
    dims kept): what ONNX shape inference reads, at a fraction of the bytes.

    Shape inference (with data propagation) reads the values of shape-like constants only:
    int64 / int32 tensors and tiny ones, all kept. Weights are typed by their dims alone, so
    inference on the skeleton names the same types and shapes as on the model, without
    serializing every weight into ONNX's C++ and back (0.3 s per call on a 90 MB encoder)."""
    sk = onnx.ModelProto()
    _copy_fields(model, sk, skip="graph")
    _copy_fields(model.graph, sk.graph, skip="initializer")
    for t in model.graph.initializer:
        if not _weightless(t):
            sk.graph.initializer.append(t)
        else:
            stub = sk.graph.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
    return sk


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph``, then each subgraph (If / Loop / Scan bodies, nested), depth first in node
    and attribute order."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from all_graphs(g)


def _has_subgraphs(graph: onnx.GraphProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for n in graph.node for a in n.attribute)


def tensor_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    """Type and shape of every tensor ONNX shape inference can name (on a weightless copy of
    ``model``: :func:`shape_skeleton`)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(shape_skeleton(model), strict_mode=False,
                                                     data_prop=True)
    except Exception as exc:  # onnx raises its own error types; fall back to declared info
        log.warning("ONNX shape inference failed (%s); using declared types only",
                    first_line(exc))
        inferred = model
    g = inferred.graph
    out: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            shape = (tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
                     if tt.HasField("shape") else None)
            out[vi.name] = TensorInfo(tt.elem_type, shape)
    for name, t in constant_tensors(g).items():
        out[name] = TensorInfo(t.data_type, tuple(t.dims))
    return out


def with_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the types and shapes ONNX shape inference finds written as value_info.

    Edited graphs carry full type information: ONNX Runtime 1.32's CPU NchwcTransformer
    crashed (segfault at session creation) on an FP16 graph from a PyTorch export that had
    no value_info, and ran it once value_info was present. Falls back to ``model`` unchanged
    if shape inference fails.
    """
    try:
        if _has_subgraphs(model.graph):  # subgraph bodies are annotated too: the whole model
            return onnx.shape_inference.infer_shapes(model, strict_mode=False)
        inferred = onnx.shape_inference.infer_shapes(shape_skeleton(model), strict_mode=False)
    except Exception as exc:  # onnx raises its own error types; keep the model as is
        log.warning("shape inference on the edited graph failed (%s); writing it without "
                    "value_info", first_line(exc))
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for name in ("value_info", "output"):  # what inference writes on the main graph
        field = getattr(out.graph, name)
        del field[:]
        field.extend(getattr(inferred.graph, name))
    return out


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """tensor name -> nodes of the main graph that read it (a node once per tensor)."""
    out: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in dict.fromkeys(i for i in node.input if i):
            out[name].append(node)
    return out


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """tensor name -> the node of the main graph that writes it."""
    return {o: node for node in graph.node for o in node.output if o}


def subgraph_captures(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Outer tensors read from inside subgraphs (If / Loop / Scan bodies) -> the owning node."""
    out: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for body in bodies:
                for name in _free_names(body):
                    if node not in out[name]:
                        out[name].append(node)
    return out


def _free_names(body: onnx.GraphProto) -> set[str]:
    local = {i.name for i in body.input} | {t.name for t in body.initializer}
    local |= {o for n in body.node for o in n.output}
    free: set[str] = set()
    for n in body.node:
        free.update(i for i in n.input if i and i not in local)
        for attr in n.attribute:
            inner = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for g in inner:
                free.update(x for x in _free_names(g) if x not in local)
    free.update(o.name for o in body.output if o.name not in local)
    return free


@dataclass(frozen=True)
class QuantSlots:
    """Which inputs of a node get Q/DQ when it runs in INT8.

    ``activations``: input slots that take a calibrated per-tensor scale;
    ``weight``: the slot quantized per channel (None if the node has no constant weight);
    ``constants``: other constant float slots, quantized per tensor from their own max-abs.
    """

    activations: tuple[int, ...]
    weight: int | None
    constants: tuple[int, ...]


def quant_slots(node: onnx.NodeProto, infos: dict[str, TensorInfo],
                constants: dict[str, object]) -> QuantSlots:
    """The Q/DQ slots of ``node`` (TRT rule 4: all inputs of weighted ops except the bias).

    Only float32 inputs are quantized; integer / bool inputs (shapes, indices) never are.
    """
    acts, consts = [], []
    weight = None
    for slot, name in enumerate(node.input):
        if not name or slot == BIAS_SLOT.get(node.op_type):
            continue
        info = infos.get(name)
        if info is None or not info.is_float32:
            continue
        if name in constants:
            if slot == WEIGHT_SLOT.get(node.op_type) and info.shape is not None and len(info.shape) >= 2:
                weight = slot
            else:
                consts.append(slot)
        else:
            acts.append(slot)
    return QuantSlots(tuple(acts), weight, tuple(consts))


def attr(node: onnx.NodeProto, name: str, default=None):
    """The value of attribute ``name`` of ``node`` (onnx.helper.get_attribute_value), or default."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2``, ... : the first not in ``taken`` (then reserved)."""
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def ancestor_nodes(graph: onnx.GraphProto, tensor: str) -> set[str]:
    """Names of every node ``tensor`` depends on (its producer and theirs, transitively)."""
    producer = producers(graph)
    seen: set[str] = set()
    todo = [tensor]
    while todo:
        n = producer.get(todo.pop())
        if n is None or n.name in seen:
            continue
        seen.add(n.name)
        todo.extend(i for i in n.input if i)
    return seen
