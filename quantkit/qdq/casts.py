"""FP16 in the graph: convert the Plan's FP16 nodes to FP16 dtypes, with Casts at boundaries.

TensorRT 10 (strongly typed) and 11 build each layer in its ONNX dtype, so "run the rest in
FP16" means rewriting the graph (TRT_RULES.md, "TensorRT 11 facts").

FP16 / INT8 boundary scheme (one scheme, every opset >= 13):

- Q/DQ stay float32: float32 scales, DequantizeLinear outputs float32, and an INT8 node
  computes in the float32 dtype with INT8 inputs (TensorRT fuses Q/DQ + op into an INT8
  kernel; the dtype only fixes the kernel's I/O). Opset 13-18 QuantizeLinear only accepts
  float32 input and scale, so this is the only scheme that works for every Q/DQ opset, and
  it is what ONNX Runtime's CPU QDQ fusions match.
- An FP16 producer feeding a QuantizeLinear gets ``Cast(to=float)`` in front of the Q; an
  INT8 node's float32 output gets ``Cast(to=float16)`` in front of FP16 consumers.
- A node that reads a DequantizeLinear output (the residual Add after an INT8 Conv) computes
  in float32 too, so nothing separates the DQ from its consumer.
- Nodes planned fp32 and nodes without an ONNX schema (custom domains) or with subgraphs
  (If / Loop / Scan) compute in float32.

Per FP16 node, each float32 input whose ONNX type constraint admits float16 becomes float16;
inputs fixed to ``tensor(float)`` (e.g. Resize ``scales``) and ops without float16 support
(e.g. Range) stay float32. Nodes with no float output (comparisons, Cast to int) compute in
float16 only when their inputs already are float16, so integer results are not rounded
through float16 for nothing. Dtype-carrying attributes follow: Cast ``to``, ConstantOfShape
``value``, Constant ``value``, EyeLike / Random* ``dtype``. Integer and bool tensors are
never touched. Float32 constants (initializers and Constant nodes) read only by float16
slots become float16 (clipped to +-65504 with a warning); when float32 slots read them too,
the float16 slots get a float16 copy. A node planned fp16 that reads a constant FP16 would
flush to 0 (a 1e-9 / 1e-12 clamp or epsilon; ``precision.fp16_rules``) computes in float32,
with a logged note: small constants are never flushed silently.

:func:`emulate_fp16` applies the same decisions without float16 kernels: float32 compute,
with every tensor that would be float16 rounded through ``Cast(float16) -> Cast(float)``.

Running these graphs on ONNX Runtime CPU (1.32, measured): the emulation keeps every
rounding pair, but its Q -> DQ -> MatMul still fuse into MatMulIntegerToFloat, which
saturates on CPUs without VNNI; open it with ``qdq_mode="exact"``
(``quantkit.backends.ort.open_exact_qdq``) for INT8 Q/DQ that is really exact. The converted
artifact is not run as written: ORT computes FP16 ops it has no CPU kernel for in FP32 and
its mandatory cast handling (every optimization level) removes the artifact's own Casts
around them and folds FP16 constants back to FP32 (MiniLM: 63 of 122 Casts gone), so ORT's
numbers for an FP16 artifact are close to FP32 ones; the emulation is the reference.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from quantkit.errors import ConfigError, GraphEditError, first_line
from quantkit.precision.fp16_rules import fp16_underflow_reasons
from quantkit.precision.plan import NodeDecision, Plan, Precision
from quantkit.graph.facts import (FLOAT, FLOAT16, check_structure, constant_arrays,
                                constant_tensors, ensure_node_names, node_names, opset_version,
                                subgraph_captures, tensor_infos, unique_name, with_value_info)

log = logging.getLogger(__name__)

__all__ = ["convert_fp16", "emulate_fp16", "fp16_overflow_nodes", "node_compute_dtypes",
           "FP16_MAX"]

#: Largest finite float16.
FP16_MAX = float(np.finfo(np.float16).max)

_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Ops whose float output dtype comes from an attribute, and that attribute's name.
_DTYPE_ATTR = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype",
               "RandomUniform": "dtype", "RandomNormalLike": "dtype",
               "RandomUniformLike": "dtype", "Bernoulli": "dtype"}
#: Ops that read only a tensor's shape, never its values (no FP16 overflow from their input).
_METADATA_OPS = frozenset({"Shape", "Size"})
#: Ops whose output dtype defaults to float when the dtype attribute is absent.
_DTYPE_DEFAULT_FLOAT = frozenset({"RandomNormal", "RandomUniform", "ConstantOfShape"})


#: ``qdq_scale_dtype`` values: "fp32" (the scheme above, every opset >= 13) or "fp16"
#: (opset >= 19 Q/DQ with float16 scales, :data:`FP16_QDQ_OPSET`).
QDQ_SCALE_DTYPES = ("fp32", "fp16")
#: The opset an artifact with float16 Q/DQ scales is exported at (QuantizeLinear-19 is the
#: first to take float16 input and scale).
FP16_QDQ_OPSET = 19
#: Smallest normal float16: a Q/DQ scale below it would lose precision (or vanish) in FP16.
FP16_MIN_NORMAL = float(np.finfo(np.float16).tiny)


def convert_fp16(model: onnx.ModelProto, plan: Plan, *, keep_io_types: bool = True,
                 qdq_scale_dtype: str = "fp32", infos: Mapping | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose FP16-planned nodes compute in float16 (scheme: module doc).

    Run it after ``insert_qdq`` (Q/DQ nodes need not be in the plan). ``keep_io_types``
    keeps float32 graph inputs and outputs (Casts inside); False makes them float16.
    ``qdq_scale_dtype="fp16"`` (opt-in; FP16-remainder plans): the model is converted to
    opset >= 19 and Q/DQ take float16 activations and scales, DequantizeLinear outputs
    float16 and INT8 nodes compute in float16, so no ``Cast(to float) -> Q`` sits in front
    of the INT8 layers (a Q/DQ pair whose scale is not a normal float16 stays float32).
    The result passes ``onnx.checker`` and runs in ONNX Runtime (which wraps float16 ops it
    has no CPU kernel for in Casts of its own).
    """
    return _Rewrite(model, plan, keep_io_types=keep_io_types, emulate=False,
                    qdq_scale_dtype=qdq_scale_dtype, infos=infos).run()


def emulate_fp16(model: onnx.ModelProto, plan: Plan, *, qdq_scale_dtype: str = "fp32",
                 infos: Mapping | None = None
                 ) -> onnx.ModelProto:
    """FP32 compute with FP16 rounding wherever :func:`convert_fp16` would hold FP16 values.

    Graph I/O stays float32 and original tensor names keep their (rounded) values, so it can
    be compared tensor by tensor with the FP32 model or the converted one.
    """
    return _Rewrite(model, plan, keep_io_types=True, emulate=True,
                    qdq_scale_dtype=qdq_scale_dtype, infos=infos).run()


def node_compute_dtypes(model: onnx.ModelProto, plan: Plan, *, qdq_scale_dtype: str = "fp32"
                        ) -> dict[str, str]:
    """node name -> "fp16" | "fp32": the dtype each node computes in after convert_fp16."""
    r = _Rewrite(model, plan, keep_io_types=True, emulate=False, qdq_scale_dtype=qdq_scale_dtype)
    r.analyze()
    return {n.name: ("fp16" if r.cd[i] == FLOAT16 else "fp32") for i, n in enumerate(r.nodes)}


def fp16_overflow_nodes(model: onnx.ModelProto, tensor_absmax: Mapping[str, float], *,
                        limit: float = FP16_MAX, infos: Mapping | None = None
                        ) -> dict[str, str]:
    """Nodes to keep in FP32: a float input or output exceeds ``limit`` (default 65504).

    ``tensor_absmax`` holds max |x| of tensors from FP32 reference runs; constants are
    measured here. Non-finite maxima are skipped: inf stays inf in FP16 (overflow is about
    finite values becoming inf). Names follow ``ensure_node_names``; ``model`` is not edited.
    Pass the result as ``build_plan(fp32_nodes_reasons=...)``.
    """
    graph = model.graph
    infos = tensor_infos(model) if infos is None else infos  # ModelGraph.infos: no re-inference
    absmax = {t: float(np.max(np.abs(v), initial=0.0))
              for t, v in constant_arrays(graph).items() if v.dtype == np.float32}
    absmax.update({t: float(v) for t, v in tensor_absmax.items()})

    def over(t: str) -> float | None:
        v = absmax.get(t)
        info = infos.get(t)
        if v is None or (info is not None and info.elem_type not in (FLOAT, 0)):
            return None
        return v if math.isfinite(v) and v > limit else None

    out: dict[str, str] = {}
    for node, name in zip(graph.node, node_names(graph)):
        reads_values = node.op_type not in _METADATA_OPS
        for kind, tensors in (("output", node.output), ("input", node.input if reads_values else ())):
            hits = [(t, over(t)) for t in tensors if t and over(t) is not None]
            if hits:
                t, v = max(hits, key=lambda h: h[1])
                out[name] = f"{kind} {t} reaches |x|={v:.4g} > FP16 max {limit:g}"
                break
    if out:
        log.info("%d nodes would overflow FP16; keep them in FP32", len(out))
    return out


def _schema(node: onnx.NodeProto, opset: int):
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return None


def _formal(params, slot: int):
    """The formal parameter of input/output ``slot`` (variadic params repeat the last)."""
    if slot < len(params):
        return params[slot]
    last = params[-1] if params else None
    if last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        return last
    return None


def _allows_fp16(schema, param) -> bool:
    if param is None:
        return False
    ts = param.type_str
    if ts.startswith("tensor("):
        return ts == "tensor(float16)"
    for c in schema.type_constraints:
        if c.type_param_str == ts:
            return "tensor(float16)" in c.allowed_type_strs
    return False


class _Rewrite:
    """Decides each node's compute dtype (analyze) and rewrites the graph (emit)."""

    def __init__(self, model: onnx.ModelProto, plan: Plan, *, keep_io_types: bool,
                 emulate: bool, qdq_scale_dtype: str = "fp32", infos: Mapping | None = None) -> None:
        if qdq_scale_dtype not in QDQ_SCALE_DTYPES:
            raise ConfigError("unknown Q/DQ scale dtype", where="qdq_scale_dtype",
                              value=qdq_scale_dtype, fix="use fp32 (default) or fp16")
        self.fp16_qdq = qdq_scale_dtype == "fp16"
        if self.fp16_qdq and not plan.nodes_with(Precision.FP16):
            raise ConfigError("FP16 Q/DQ scales need an FP16 remainder; the plan has no FP16 "
                              "node", where="qdq_scale_dtype", value=qdq_scale_dtype,
                              fix="set precision.remainder=fp16, or keep fp32 scales")
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        ensure_node_names(self.model)
        if self.fp16_qdq and opset_version(self.model) < FP16_QDQ_OPSET:
            before = {n.name for n in self.model.graph.node}
            self.model = to_opset(self.model, FP16_QDQ_OPSET, why="FP16 Q/DQ scales")
            ensure_node_names(self.model)
            added = [n.name for n in self.model.graph.node if n.name not in before]
            if added:  # e.g. the axes constants opset 18 moved from attributes to inputs
                plan = Plan({**plan.decisions, **{n: NodeDecision(
                    Precision.FP32, "added by the opset converter") for n in added}},
                    plan.activation_amax, plan.calibrator, plan.activation_range)
        self.plan = plan
        self.keep_io = keep_io_types or emulate
        self.emulate = emulate
        self.graph = self.model.graph
        self.nodes = list(self.graph.node)
        self.opset = opset_version(self.model)
        self.infos = tensor_infos(self.model) if infos is None else dict(infos)
        self.constants = constant_tensors(self.graph)
        self.graph_inputs = [i.name for i in self.graph.input]
        self.captures = subgraph_captures(self.graph)
        self.taken = ({t for n in self.nodes for t in list(n.input) + list(n.output)}
                      | set(self.graph_inputs) | {t.name for t in self.graph.initializer})
        self.taken_nodes = {n.name for n in self.nodes}
        self.underflow = fp16_underflow_reasons(self.model)

    def is_f32(self, t: str) -> bool:
        info = self.infos.get(t)
        return bool(t) and info is not None and info.elem_type == FLOAT

    def _unique(self, name: str, taken: set[str] | None = None) -> str:
        return unique_name(name, self.taken if taken is None else taken)

    # -- analysis -------------------------------------------------------------------------
    def _fp16_q_outputs(self) -> set[str]:
        """Outputs of the QuantizeLinear nodes that run in FP16 (``qdq_scale_dtype="fp16"``):
        every Q whose scale is a normal, finite float16; the others stay float32 (logged)."""
        if not self.fp16_qdq:
            return set()
        out = set()
        for n in self.nodes:
            if n.op_type != "QuantizeLinear" or len(n.input) < 2 or n.input[1] not in self.constants:
                continue
            s = np.abs(numpy_helper.to_array(self.constants[n.input[1]]).astype(np.float64))
            if s.size and np.all(np.isfinite(s)) and s.min() >= FP16_MIN_NORMAL \
                    and s.max() <= FP16_MAX:
                out.update(n.output)
            else:
                log.info("Q/DQ of %s keeps a float32 scale: %.3g is not a normal float16",
                         n.input[0], float(s.min()) if s.size else float("nan"))
        return out

    def analyze(self) -> None:
        """Fill cd (node compute dtype), want (node, slot) -> dtype, dt (tensor dtype)."""
        q16 = self._fp16_q_outputs()
        self.fp16_qdq_nodes = {i for i, n in enumerate(self.nodes)
                               if (n.op_type == "QuantizeLinear" and set(n.output) & q16)
                               or (n.op_type == "DequantizeLinear" and n.input
                                   and n.input[0] in q16)}
        dq_outputs = {o for i, n in enumerate(self.nodes) if n.op_type == "DequantizeLinear"
                      and i not in self.fp16_qdq_nodes for o in n.output}
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        io_dtype = FLOAT if self.keep_io else FLOAT16
        self.dt: dict[str, int] = {t: io_dtype for t in self.graph_inputs if self.is_f32(t)}
        self.cd: list[int] = []
        self.want: dict[tuple[int, int], int] = {}
        self.attr_edit: set[int] = set()
        for i, node in enumerate(self.nodes):
            cd = self._compute_dtype(node, dq_outputs)
            schema = _schema(node, self.opset)
            for s, t in enumerate(node.input):
                if self.is_f32(t):
                    fp16_ok = cd == FLOAT16 and _allows_fp16(schema, _formal(schema.inputs, s))
                    self.want[(i, s)] = FLOAT16 if fp16_ok else FLOAT
            self.cd.append(cd)
            for j, o in enumerate(node.output):
                if self.is_f32(o):
                    self.dt[o] = self._output_dtype(i, node, schema, j) if cd == FLOAT16 else FLOAT

    def _compute_dtype(self, node: onnx.NodeProto, dq_outputs: set[str]) -> int:
        d = self.plan.decisions.get(node.name)
        if node.op_type in _QDQ_OPS:
            return FLOAT16 if self.node_index[node.name] in self.fp16_qdq_nodes else FLOAT
        if d is None:
            raise GraphEditError("node is not in the plan", where="qdq.casts", value=node.name,
                                 fix="build the plan on this model (build_plan), and insert "
                                     "Q/DQ with insert_qdq before converting")
        int8_fp16 = self.fp16_qdq and d.precision is Precision.INT8
        if d.precision is not Precision.FP16 and not int8_fp16:
            return FLOAT
        if _schema(node, self.opset) is None:
            log.warning("node %s (%s) has no ONNX schema; it stays float32", node.name,
                        node.op_type)
            return FLOAT
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute):
            return FLOAT
        if any(t in dq_outputs for t in node.input):
            return FLOAT
        if node.name in self.underflow:
            log.info("node %s planned fp16 computes in FP32: %s", node.name,
                     self.underflow[node.name])
            return FLOAT
        unknown = [t for t in node.input if t and t not in self.infos]
        if unknown:
            raise GraphEditError(f"type of tensor {unknown[0]} (read by {node.name}) is unknown",
                                 where="qdq.casts", value=unknown[0],
                                 fix="give the model complete type information (onnx "
                                     "shape inference must type every tensor), or plan the "
                                     "node fp32")
        float_out = [o for o in node.output if self.is_f32(o)]
        float_in = [t for t in node.input if self.is_f32(t) and t not in self.constants]
        if not float_out:
            # comparisons, Cast to int, ArgMax...: compute in whatever the inputs already are
            return FLOAT16 if float_in and all(self.dt.get(t) == FLOAT16 for t in float_in) else FLOAT
        return FLOAT16

    def _output_dtype(self, i: int, node: onnx.NodeProto, schema, j: int) -> int:
        param = _formal(schema.outputs, j)
        if param is None or not _allows_fp16(schema, param):
            return FLOAT
        ts = param.type_str
        bound = [s for s, t in enumerate(node.input)
                 if t and (p := _formal(schema.inputs, s)) is not None and p.type_str == ts]
        if bound:
            return FLOAT16 if any(self.want.get((i, s)) == FLOAT16 for s in bound) else FLOAT
        if node.op_type in _DTYPE_ATTR or node.op_type == "ConstantOfShape":
            self.attr_edit.add(i)
            return FLOAT16
        return FLOAT  # e.g. LayerNormalization Mean / InvStdDev (type U)

    # -- emission -------------------------------------------------------------------------
    def run(self) -> onnx.ModelProto:
        self.analyze()
        if not self.emulate and not any(c == FLOAT16 for c in self.cd):
            log.info("no node computes in FP16; model unchanged except node names")
        self.casts: dict[tuple[str, int], str] = {}
        self.new_nodes: list[onnx.NodeProto] = []
        const_name = self._resolve_constants()
        constant_nodes = {n.output[0] for n in self.nodes if n.op_type == "Constant" and n.output}
        for i, node in enumerate(self.nodes):
            if node.op_type == "Constant" and node.output and node.output[0] in constant_nodes:
                self.new_nodes.append(node)
                continue
            for s, t in enumerate(node.input):
                want = self.want.get((i, s))
                if want is None:
                    continue
                if t in self.constants:
                    node.input[s] = const_name[(t, want)]
                else:
                    node.input[s] = self._convert(t, self.dt[t], want)
            if not self.emulate and i in self.attr_edit:
                self._edit_dtype_attr(node)
            self.new_nodes.append(node)
            if self.emulate and self.cd[i] == FLOAT16:
                self._round_outputs(node)
        self._fix_captures()
        self._fix_graph_io()
        del self.graph.node[:]
        self.graph.node.extend(self.new_nodes)
        self._fix_value_info()
        self.model = with_value_info(self.model)
        try:
            check_structure(self.model)
        except onnx.checker.ValidationError as exc:
            raise GraphEditError(f"FP16 graph fails onnx.checker: {first_line(exc)}",
                                 where="qdq.casts",
                                 fix="report this with the model; plan the offending node fp32 "
                                     "meanwhile") from exc
        n16 = sum(c == FLOAT16 for c in self.cd)
        log.info("%s: %d of %d nodes in FP16, %d Cast nodes added",
                 "emulate_fp16" if self.emulate else "convert_fp16", n16, len(self.nodes),
                 len(self.casts))
        return self.model

    def _convert(self, t: str, have: int, want: int) -> str:
        """Name of ``t`` as ``want`` (adds a Cast, or a rounding pair when emulating)."""
        if have == want:
            return t
        if self.emulate:
            if want == FLOAT:  # an FP16-rounded value is already exact in float32
                return t
            key = (t, FLOAT16)
            if key not in self.casts:
                self.casts[key] = self._round_pair(t, self._unique(f"{t}__fp16r"))
            return self.casts[key]
        key = (t, want)
        if key not in self.casts:
            suffix = "fp16" if want == FLOAT16 else "fp32"
            out = self._unique(f"{t}__to_{suffix}")
            self.new_nodes.append(helper.make_node(
                "Cast", [t], [out], to=want,
                name=self._unique(f"{t}__Cast_to_{suffix}", self.taken_nodes)))
            self.casts[key] = out
        return self.casts[key]

    def _round_pair(self, src: str, dst: str) -> str:
        mid = self._unique(f"{dst}__half")
        self.new_nodes.append(helper.make_node(
            "Cast", [src], [mid], to=FLOAT16, name=self._unique(f"{dst}__Cast_fp16", self.taken_nodes)))
        self.new_nodes.append(helper.make_node(
            "Cast", [mid], [dst], to=FLOAT, name=self._unique(f"{dst}__Cast_fp32", self.taken_nodes)))
        return dst

    def _round_outputs(self, node: onnx.NodeProto) -> None:
        for j, o in enumerate(node.output):
            if self.dt.get(o) == FLOAT16:
                raw = self._unique(f"{o}__fp32_unrounded")
                node.output[j] = raw
                self._round_pair(raw, o)

    def _resolve_constants(self) -> dict[tuple[str, int], str]:
        """Convert / copy float32 constants per the dtypes their readers want."""
        wanted: dict[str, set[int]] = defaultdict(set)
        for (i, s), w in self.want.items():
            t = self.nodes[i].input[s]
            if t in self.constants:
                wanted[t].add(w)
        for t in self.captures:
            if t in self.constants and self.is_f32(t):
                wanted[t].add(FLOAT)
        for o in self.graph.output:
            if o.name in self.constants and self.is_f32(o.name):
                wanted[o.name].add(FLOAT if self.keep_io else FLOAT16)
        inits = {t.name: t for t in self.graph.initializer}
        const_nodes = {n.output[0]: n for n in self.nodes if n.op_type == "Constant" and n.output}
        names: dict[tuple[str, int], str] = {}
        for t, ws in wanted.items():
            names[(t, FLOAT)] = t
            if FLOAT16 not in ws:
                continue
            value = numpy_helper.to_array(self.constants[t])
            half = self._to_half(value, t)
            if ws == {FLOAT16}:
                new = numpy_helper.from_array(half.astype(np.float32) if self.emulate else half, t)
                if t in inits:
                    inits[t].CopyFrom(new)
                else:
                    for a in const_nodes[t].attribute:
                        if a.name == "value":
                            a.t.CopyFrom(new)
                self.dt[t] = FLOAT if self.emulate else FLOAT16
                names[(t, FLOAT16)] = t
            else:
                copy = self._unique(f"{t}__fp16")
                self.graph.initializer.append(numpy_helper.from_array(
                    half.astype(np.float32) if self.emulate else half, copy))
                names[(t, FLOAT16)] = copy
        return names

    @staticmethod
    def _to_half(value: np.ndarray, name: str) -> np.ndarray:
        finite = np.isfinite(value)
        big = finite & (np.abs(value) > FP16_MAX)
        if np.any(big):
            log.warning("constant %s has %d values beyond FP16 range; clipped to +-%g",
                        name, int(big.sum()), FP16_MAX)
            value = np.where(big, np.clip(value, -FP16_MAX, FP16_MAX), value)
        return value.astype(np.float16)

    def _edit_dtype_attr(self, node: onnx.NodeProto) -> None:
        if node.op_type == "ConstantOfShape":
            for a in node.attribute:
                if a.name == "value":
                    v = numpy_helper.to_array(a.t)
                    if v.dtype == np.float32:
                        a.t.CopyFrom(numpy_helper.from_array(self._to_half(v, node.name)))
                    return
            node.attribute.append(helper.make_attribute(
                "value", numpy_helper.from_array(np.zeros(1, dtype=np.float16))))
            return
        name = _DTYPE_ATTR[node.op_type]
        for a in node.attribute:
            if a.name == name:
                if a.i == FLOAT:
                    a.i = FLOAT16
                return
        if node.op_type in _DTYPE_DEFAULT_FLOAT:
            node.attribute.append(helper.make_attribute(name, FLOAT16))

    def _fix_captures(self) -> None:
        """Subgraph bodies read captured outer tensors as float32."""
        for t, owners in self.captures.items():
            if self.dt.get(t) != FLOAT16 or self.emulate:
                continue
            # the Cast must precede the owner: build it, then move it in front of the owner
            before = len(self.new_nodes)
            cast = self._convert(t, FLOAT16, FLOAT)
            added = self.new_nodes[before:]
            del self.new_nodes[before:]
            first = min(self.new_nodes.index(o) for o in owners if o in self.new_nodes)
            self.new_nodes[first:first] = added
            for owner in owners:
                for a in owner.attribute:
                    for body in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                        _rename_free(body, t, cast)

    def _fix_graph_io(self) -> None:
        if not self.keep_io:
            for vi in self.graph.input:
                if self.is_f32(vi.name):
                    vi.type.tensor_type.elem_type = FLOAT16
        for vi in self.graph.output:
            o = vi.name
            if not self.is_f32(o) or o in self.constants:
                continue
            want = FLOAT if self.keep_io else FLOAT16
            have = self.dt.get(o, FLOAT)
            if self.emulate or have == want:
                vi.type.tensor_type.elem_type = want if not self.emulate else FLOAT
                continue
            if o in self.graph_inputs:
                continue
            inner = self._unique(f"{o}__{'fp16' if have == FLOAT16 else 'fp32'}")
            for n in self.new_nodes:
                for k, t in enumerate(n.input):
                    if t == o:
                        n.input[k] = inner
                for k, t in enumerate(n.output):
                    if t == o:
                        n.output[k] = inner
            for v in self.graph.value_info:
                if v.name == o:
                    v.name = inner
            self.dt[inner] = have
            self.new_nodes.append(helper.make_node(
                "Cast", [inner], [o], to=want,
                name=self._unique(f"{o}__Cast_output", self.taken_nodes)))
            vi.type.tensor_type.elem_type = want

    def _fix_value_info(self) -> None:
        if self.emulate:
            return
        for vi in self.graph.value_info:
            if vi.name in self.dt and vi.type.HasField("tensor_type"):
                vi.type.tensor_type.elem_type = self.dt[vi.name]


def to_opset(model: onnx.ModelProto, opset: int, *, why: str) -> onnx.ModelProto:
    """``model`` converted to default-domain ``opset`` with ONNX's version converter
    (``why``: what needs it, e.g. "FP16 Q/DQ scales", "FP8 Q/DQ"); node names kept."""
    from onnx import version_converter

    try:
        out = version_converter.convert_version(model, opset)
    except Exception as exc:  # the converter raises its own untyped errors
        raise GraphEditError(f"cannot convert the model to opset {opset} for {why}: "
                             f"{first_line(exc)}",
                             where="qdq.casts.to_opset", value=opset_version(model),
                             fix=f"export the model at opset >= {opset}") from exc
    log.info("converted the model from opset %d to %d for %s", opset_version(model), opset, why)
    return out


def _rename_free(body: onnx.GraphProto, old: str, new: str) -> None:
    local = {i.name for i in body.input} | {t.name for t in body.initializer}
    local |= {o for n in body.node for o in n.output}
    if old in local:
        return
    for n in body.node:
        for k, t in enumerate(n.input):
            if t == old:
                n.input[k] = new
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_free(g, old, new)
    for o in body.output:
        if o.name == old:
            o.name = new
