"""Check a Q/DQ ONNX graph against the TensorRT placement rules (TRT_RULES.md).

``lint_qdq(model)`` returns a list of :class:`Violation` (empty means clean). Rules:

=====================  ==========================================================  =====
rule                   what it flags                                               TRT
=====================  ==========================================================  =====
zero-point-dtype       Q/DQ whose zero point (or int8 data) is not int8 (uint8...)   1
zero-point-nonzero     a zero point with a non-zero value                            1
scale-not-constant     a scale or zero point that is not a build-time constant       2
scale-invalid          a scale that is not positive and finite, or not fp32/fp16    2
weight-per-tensor      one scale for a weight with several output channels          3
weight-axis            per-channel weight scales on the wrong axis                   3
unsupported-op         QLinearConv, ConvInteger, MatMulInteger, QLinearMatMul,       8
                       DynamicQuantizeLinear (and other QLinear* ops)
nonfinite-quantized    Q on a tensor known (or seen) to carry inf / nan              9
dq-shared              a DequantizeLinear output read by several nodes              7
q-without-dq           a QuantizeLinear output read by anything but DequantizeLinear 7
concat-shared-scale    a Q whose input carries a Concat's output (through casts,    7 [4]
                       layout ops, nested Concats) when that Concat's inputs'
                       amax differ by more than ``concat_range_ratio`` or it joins
                       box-like and score-like (Sigmoid / Softmax) inputs
=====================  ==========================================================  =====

[4] TensorRT moves a Q backward through a Concat (rule 7; ModelOpt counts Concat among its
    copy ops), so one Q after it is one scale for every input: box coordinates in pixels
    beside class scores round every score to 0 (ultralytics PR 25524, mmyolo 776, YOLOv6 969).
    The fix: a per-tensor Q/DQ on each input before the Concat, or no Q/DQ after it (its
    readers FP16), as quantkit's plan does (:mod:`quantkit.graph.mixed_concat`). Ranges come
    from ``activation_amax`` (calibration) where given, else from the scales of DQs feeding
    the Concat; without either, only the box / score rule can fire.

FP8 E4M3 Q/DQ (zero point or data ``float8e4m3fn``; TRT_RULES.md "FP8") is TensorRT's
other quantized format: rules 1 and 3 above are INT8's; an FP8 Q/DQ is checked by
:data:`FP8_RULES` instead (the shared scale, constant, nonfinite and pairing rules apply):

======================  =========================================================  ======
fp8-opset               FP8 Q/DQ in a model below opset 19 (float8 types are        ONNX
                        opset 19's)
fp8-zero-point-nonzero  an FP8 zero point that is not 0                             [1]
fp8-weight-per-channel  FP8 weight with per-channel scales                          [1][2]
fp8-consumer            an FP8 DequantizeLinear read by an op that is not            [3]
                        MatMul / Gemm / Conv / ConvTranspose
======================  =========================================================  ======

[1] TensorRT developer guide, "Quantization Schemes": FP8 is
    ``castToFp8(clip(x / s, -448, 448))`` with ``s`` "a 16-bit or 32-bit floating point
    scalar", symmetric (no zero point),
    https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/quantized-types-schemes.html
[2] per-tensor is the FP8 weight granularity TensorRT documents for every op and the one
    TRT_RULES.md calls always accepted; per-channel FP8 weights were not found documented per
    op (TensorRT guide, onnx-tensorrt) when this rule was written, so quantkit writes FP8
    weights per tensor for MatMul, Gemm, Conv and ConvTranspose alike and flags anything else.
[3] TensorRT-RTX "Working with Quantized Types": "FP8 is only supported for matrix
    multiplications (GEMM) on Ada and later architectures (compute capability 8.9 or later)",
    https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/work-quantized-types.html
    (Conv is allowed here: TensorRT lowers it to implicit GEMM; TRT_RULES.md warns FP8
    convolutions may not be selected, which is a cost question, not a lint one.)

Nodes are named as ``ensure_node_names`` would name them; the model is not edited.

These are TensorRT's rules (target ``tensorrt``). Artifacts for target ``ort_cpu``
(``qdq/targets.py``) use uint8 activations on purpose; :func:`lint_ort_cpu` checks them
against that target's own rules (:data:`ORT_CPU_RULES`), and :func:`lint_for_target` picks
the rule set of a target.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

import ml_dtypes
import numpy as np
import onnx

from quantkit.graph.facts import attr, constant_arrays, consumers, node_names, producers
from quantkit.graph.mixed_concat import DEFAULT_CONCAT_RANGE_RATIO, MixedConcat, mixed_concats
from quantkit.graph.weights import BIAS_SLOT, FP8_CONSUMERS, WEIGHT_SLOT, weight_axis

__all__ = ["Violation", "lint_qdq", "lint_ort_cpu", "lint_for_target", "RULES", "ORT_CPU_RULES",
           "FP8_RULES"]

RULES = ("zero-point-dtype", "zero-point-nonzero", "scale-not-constant", "scale-invalid",
         "weight-per-tensor", "weight-axis", "unsupported-op", "nonfinite-quantized",
         "dq-shared", "q-without-dq", "concat-shared-scale")

#: TensorRT's FP8 E4M3 rules (module docstring: sources)
FP8_RULES = ("fp8-opset", "fp8-zero-point-nonzero", "fp8-weight-per-channel", "fp8-consumer")
_FP8 = np.dtype(ml_dtypes.float8_e4m3fn)

UNSUPPORTED_OPS = frozenset({"QLinearConv", "ConvInteger", "MatMulInteger",
                             "DynamicQuantizeLinear", "QLinearMatMul",
                             # ONNX Runtime contrib ops that quantization tools emit
                             "QGemm", "QAttention", "DynamicQuantizeMatMul",
                             "MatMulIntegerToFloat"})
#: target ort_cpu: activation-not-uint8 (an activation Q whose zero point is not uint8:
#: MLAS's fast x86 GEMMs take uint8 A), weight-not-int8 (a weight DQ whose data or zero
#: point is not int8, or a non-zero weight zero point; int32 data is allowed for a DQ that
#: feeds only bias inputs), plus the shared scale-not-constant,
#: scale-invalid, weight-axis, nonfinite-quantized, dq-shared and q-without-dq rules;
#: q-not-shared (an activation quantized by several QuantizeLinear nodes: ORT fuses a
#: producer with its output Q only when that output feeds one Q) and output-not-fused (an
#: INT8 Conv whose output, past a single-reader Relu / Clip, is read by a QuantizeLinear and
#: by float nodes too: ORT CPU has no INT8 Conv with float output, so the Conv stays float).
ORT_CPU_RULES = ("activation-not-uint8", "weight-not-int8", "scale-not-constant",
                 "scale-invalid", "weight-axis", "nonfinite-quantized", "dq-shared",
                 "q-without-dq", "q-not-shared", "output-not-fused", "concat-shared-scale")
_INT8 = onnx.TensorProto.INT8
_SCALE_DTYPES = (np.float32, np.float16)


@dataclass(frozen=True)
class Violation:
    """One broken rule at one node."""

    rule: str
    node: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule} {self.node}: {self.message}"

    def to_dict(self) -> dict:
        return asdict(self)


def _graph_facts(graph):
    """What every lint reads: node names, constants, readers and producer of each tensor,
    and the graph's output names."""
    return (node_names(graph), constant_arrays(graph), consumers(graph), producers(graph),
            {o.name for o in graph.output})


def lint_qdq(model: onnx.ModelProto, *, nonfinite_tensors: Iterable[str] = (),
             activation_amax: Mapping[str, float] | None = None,
             concat_range_ratio: float = DEFAULT_CONCAT_RANGE_RATIO) -> list[Violation]:
    """Every TensorRT Q/DQ rule violation in ``model``'s main graph, in graph order.

    ``nonfinite_tensors``: tensors known to carry inf / nan (e.g. from calibration);
    quantizing them is flagged. Constant inputs of Q are checked for inf / nan directly.
    ``activation_amax`` / ``concat_range_ratio``: the calibrated ranges (the Plan's) and the
    ratio of rule ``concat-shared-scale``.
    """
    graph = model.graph
    names, consts, readers, prod, outputs = _graph_facts(graph)
    nonfinite = set(nonfinite_tensors)
    mixed = mixed_concats(graph, activation_amax or {}, ratio=concat_range_ratio)
    out: list[Violation] = []
    opset = next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), 0)

    for node, name in zip(graph.node, names):
        def flag(rule: str, message: str) -> None:
            out.append(Violation(rule, name, message))

        op = node.op_type
        if op in ("QuantizeLinear", "DequantizeLinear") and _is_fp8(node, consts):
            _check_fp8(node, name, consts, prod, readers, opset, flag)
        if op in UNSUPPORTED_OPS or op.startswith("QLinear"):
            flag("unsupported-op", f"{op} is not supported by TensorRT; use float weights or "
                                   "int8 weights behind QuantizeLinear/DequantizeLinear (rule 8)")
            continue
        if op not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        _check_scale_zp(node, consts, flag)
        x = node.input[0] if node.input else ""
        if op == "QuantizeLinear":
            _check_concat(x, mixed, flag)
            if x in nonfinite:
                flag("nonfinite-quantized", f"quantizes {x}, which carries non-finite values "
                                            "(rule 9); keep it in float")
            elif x in consts and not np.all(np.isfinite(consts[x])):
                flag("nonfinite-quantized", f"quantizes constant {x}, which holds inf/nan (rule 9)")
            q_out = node.output[0] if node.output else ""
            bad = [n for n in readers.get(q_out, []) if n.op_type != "DequantizeLinear"]
            if not readers.get(q_out) or bad or q_out in outputs:
                what = (f"read by {', '.join(n.op_type for n in bad)}" if bad
                        else "a graph output" if q_out in outputs else "not read")
                flag("q-without-dq", f"output {q_out} is {what}; follow every "
                                     "QuantizeLinear by a DequantizeLinear (rule 7)")
            if not _has_int8_output(node, consts):
                zp = node.input[2] if len(node.input) > 2 else ""
                if not zp:
                    flag("zero-point-dtype", "no zero point and no output_dtype: output is "
                                             "uint8; TensorRT needs int8 zero point 0 (rule 1)")
        else:
            if x in consts and len(node.input) < 3 and consts[x].dtype not in (np.int8, _FP8):
                flag("zero-point-dtype", f"dequantizes {consts[x].dtype} data {x}; "
                                         "TensorRT needs int8 (rule 1)")
            dq_out = node.output[0] if node.output else ""
            n_readers = len(readers.get(dq_out, [])) + (dq_out in outputs)
            if n_readers > 1:
                flag("dq-shared", f"output {dq_out} is read by {n_readers} consumers; give "
                                  "each consumer its own Q/DQ pair (rule 7)")
            _check_weight(node, name, x, consts, prod, readers, flag)
    return out


def lint_for_target(model: onnx.ModelProto, target: str, *,
                    nonfinite_tensors: Iterable[str] = (),
                    activation_amax: Mapping[str, float] | None = None,
                    concat_range_ratio: float = DEFAULT_CONCAT_RANGE_RATIO) -> list[Violation]:
    """The violations of ``target``'s rule set: TensorRT's or ort_cpu's."""
    from quantkit.qdq.targets import get_target

    lint = lint_ort_cpu if get_target(target).lint == "ort_cpu" else lint_qdq
    return lint(model, nonfinite_tensors=nonfinite_tensors, activation_amax=activation_amax,
                concat_range_ratio=concat_range_ratio)


def lint_ort_cpu(model: onnx.ModelProto, *,
                 nonfinite_tensors: Iterable[str] = (),
                 activation_amax: Mapping[str, float] | None = None,
                 concat_range_ratio: float = DEFAULT_CONCAT_RANGE_RATIO) -> list[Violation]:
    """Violations of target ort_cpu's rules (:data:`ORT_CPU_RULES`) in graph order.

    Every quantized activation is uint8 with a constant, positive scale; every weight is
    per-channel signed INT8 with zero point 0 on its output-channel axis; every Q feeds only
    DequantizeLinear and every DQ feeds one consumer (so ONNX Runtime can fuse each
    quantized op on its own); an activation has one QuantizeLinear; a quantized Conv output
    is read through DQs only; no tensor with inf / nan is quantized; no Q after a Concat whose
    inputs may not share one scale (``concat-shared-scale``, as :func:`lint_qdq`).
    """
    graph = model.graph
    names, consts, readers, prod, outputs = _graph_facts(graph)
    nonfinite = set(nonfinite_tensors)
    mixed = mixed_concats(graph, activation_amax or {}, ratio=concat_range_ratio)
    out: list[Violation] = []
    first_q: dict[str, str] = {}
    for node, name in zip(graph.node, names):
        def flag(rule: str, message: str) -> None:
            out.append(Violation(rule, name, message))

        op = node.op_type
        if op == "Conv":
            _check_conv_output(node, readers, prod, consts, outputs, flag)
        if op not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        x = node.input[0] if node.input else ""
        zp = node.input[2] if len(node.input) > 2 else ""
        shared: list[Violation] = []  # TensorRT's scale checks hold here too; its zp ones not
        _check_scale_zp(node, consts, lambda rule, msg: shared.append(Violation(rule, name, msg)))
        out.extend(v for v in shared if v.rule in ("scale-not-constant", "scale-invalid"))
        if op == "QuantizeLinear":
            weight = x in consts
            _check_concat(x, mixed, flag)
            if x in nonfinite:
                flag("nonfinite-quantized", f"quantizes {x}, which carries non-finite values; "
                                            "keep it in float")
            elif weight and not np.all(np.isfinite(consts[x])):
                flag("nonfinite-quantized", f"quantizes constant {x}, which holds inf/nan")
            if not weight and x in first_q:
                flag("q-not-shared", f"activation {x} is already quantized by {first_q[x]}; "
                                     "use one QuantizeLinear per tensor and one "
                                     "DequantizeLinear per reader (ORT fuses a producer with "
                                     "its output Q only when that output feeds one Q)")
            first_q.setdefault(x, name)
            q_out = node.output[0] if node.output else ""
            bad = [n for n in readers.get(q_out, []) if n.op_type != "DequantizeLinear"]
            if not readers.get(q_out) or bad or q_out in outputs:
                flag("q-without-dq", f"output {q_out} is not read by DequantizeLinear only")
            zp_dtype = consts[zp].dtype if zp in consts else (
                np.uint8 if not zp and not attr(node, "output_dtype", 0) else None)
            if weight:
                if zp_dtype != np.int8 or (zp in consts and np.any(consts[zp] != 0)):
                    flag("weight-not-int8", f"weight {x} is not signed INT8 with zero point 0")
            elif zp_dtype != np.uint8:
                flag("activation-not-uint8", f"activation {x} is quantized to {zp_dtype}; "
                                             "ONNX Runtime's fast x86 kernels take uint8 "
                                             "activations (target ort_cpu)")
        else:
            dq_out = node.output[0] if node.output else ""
            n_readers = len(readers.get(dq_out, [])) + (dq_out in outputs)
            if n_readers > 1:
                flag("dq-shared", f"output {dq_out} is read by {n_readers} consumers; give "
                                  "each consumer its own Q/DQ pair so each one fuses")
            bias = x in consts and consts[x].dtype == np.int32 and readers.get(dq_out) and all(
                BIAS_SLOT.get(r.op_type) is not None and len(r.input) > BIAS_SLOT[r.op_type]
                and r.input[BIAS_SLOT[r.op_type]] == dq_out for r in readers[dq_out])
            if x in consts and consts[x].dtype != np.int8 and not bias:
                flag("weight-not-int8", f"dequantizes {consts[x].dtype} constant {x}; "
                                        "weights are signed INT8 (int32 only for biases)")
            trt: list[Violation] = []
            _check_weight(node, name, x, consts, prod, readers,
                          lambda rule, msg: trt.append(Violation(rule, name, msg)))
            out.extend(v for v in trt if v.rule == "weight-axis")
            out.extend(Violation("weight-not-int8", v.node, v.message) for v in trt
                       if v.rule == "weight-per-tensor")
    return out


def _check_concat(x: str, mixed: Mapping[str, MixedConcat], flag) -> None:
    """concat-shared-scale: a Q of a tensor that carries a mixed Concat's output."""
    if x in mixed:
        flag("concat-shared-scale",
             f"quantizes {x} with one scale, but {mixed[x].describe()}. TensorRT moves this Q "
             "back through the Concat, so every input gets that one scale: give each Concat "
             "input its own per-tensor Q/DQ before the Concat, or keep the Concat's readers "
             "FP16 with no Q/DQ after it (rule 7)")


def _check_conv_output(conv: onnx.NodeProto, readers, prod, consts, outputs, flag) -> None:
    """ort_cpu output-not-fused: an INT8 Conv (activation and weight behind DQ) whose output,
    past single-reader Relu / Clip nodes, is quantized but also read in float."""
    def from_dq(t: str) -> bool:
        p = prod.get(t)
        return p is not None and p.op_type == "DequantizeLinear"

    if len(conv.input) < 2 or not (from_dq(conv.input[0]) and from_dq(conv.input[1])) \
            or not conv.output:
        return
    t = conv.output[0]
    while t not in outputs and len(readers.get(t, ())) == 1 \
            and readers[t][0].op_type in ("Relu", "Clip") and readers[t][0].output:
        t = readers[t][0].output[0]
    rs = readers.get(t, [])
    qs = [r for r in rs if r.op_type == "QuantizeLinear"]
    if qs and (len(rs) > len(qs) or t in outputs):
        others = sorted({r.op_type for r in rs if r.op_type != "QuantizeLinear"}
                        | ({"graph output"} if t in outputs else set()))
        flag("output-not-fused", f"output {t} is quantized but also read in float by "
                                 f"{', '.join(others)}; read it through DequantizeLinear so "
                                 "ONNX Runtime fuses the Conv into QLinearConv")


def _has_int8_output(q: onnx.NodeProto, consts: dict[str, np.ndarray]) -> bool:
    """INT8 or FP8 E4M3 output (FP8 has its own rules, :func:`_check_fp8`)."""
    zp = q.input[2] if len(q.input) > 2 else ""
    if zp:
        return zp in consts and consts[zp].dtype in (np.int8, _FP8)
    return attr(q, "output_dtype", 0) in (_INT8, onnx.TensorProto.FLOAT8E4M3FN)


def _is_fp8(node: onnx.NodeProto, consts: dict[str, np.ndarray]) -> bool:
    """A Q/DQ whose zero point, or a DQ whose constant data, is float8e4m3fn."""
    zp = node.input[2] if len(node.input) > 2 else ""
    if zp in consts:
        return consts[zp].dtype == _FP8
    x = node.input[0] if node.input else ""
    return (node.op_type == "DequantizeLinear" and x in consts and consts[x].dtype == _FP8) \
        or attr(node, "output_dtype", 0) == onnx.TensorProto.FLOAT8E4M3FN


def _check_fp8(node: onnx.NodeProto, name: str, consts, prod, readers, opset: int,
               flag) -> None:
    """:data:`FP8_RULES` for one FP8 Q/DQ node."""
    if opset < 19:
        flag("fp8-opset", f"FP8 {node.op_type} in an opset-{opset} model; float8e4m3fn Q/DQ "
                          "needs opset 19")
    zp = node.input[2] if len(node.input) > 2 else ""
    if zp in consts and np.any(consts[zp].astype(np.float32) != 0):
        flag("fp8-zero-point-nonzero", f"FP8 zero point {zp} is not 0; TensorRT FP8 is "
                                       "symmetric")
    if node.op_type != "DequantizeLinear" or not node.output:
        return
    for reader in readers.get(node.output[0], []):
        if reader.op_type not in FP8_CONSUMERS:
            flag("fp8-consumer", f"FP8 output {node.output[0]} is read by {reader.op_type}; "
                                 "TensorRT runs FP8 in GEMMs (MatMul, Gemm) and convolutions")
    x = node.input[0] if node.input else ""
    q = prod.get(x)
    weight = x in consts or (q is not None and q.op_type == "QuantizeLinear" and q.input
                             and q.input[0] in consts)
    scale = node.input[1] if len(node.input) > 1 else ""
    if weight and scale in consts and consts[scale].size > 1:
        flag("fp8-weight-per-channel", f"FP8 weight {x} has {consts[scale].size} scales; "
                                       "write FP8 weights per tensor (one scale)")


def _check_scale_zp(node: onnx.NodeProto, consts: dict[str, np.ndarray], flag) -> None:
    scale = node.input[1] if len(node.input) > 1 else ""
    zp = node.input[2] if len(node.input) > 2 else ""
    if scale not in consts:
        flag("scale-not-constant", f"scale {scale or '<missing>'} is not a build-time "
                                   "constant (initializer or Constant) (rule 2)")
    else:
        s = consts[scale]
        if s.dtype not in _SCALE_DTYPES:
            flag("scale-invalid", f"scale {scale} is {s.dtype}; use float32 or float16 (rule 2)")
        elif not np.all(np.isfinite(s)) or np.any(s <= 0):
            bad = s[~(np.isfinite(s) & (s > 0))].ravel()
            flag("scale-invalid", f"scale {scale} has {bad.size} values that are not positive "
                                  f"and finite (e.g. {bad[0]!r}) (rule 2)")
    if not zp:
        return
    if zp not in consts:
        flag("scale-not-constant", f"zero point {zp} is not a build-time constant (rule 2)")
        return
    z = consts[zp]
    if z.dtype == _FP8:
        return  # FP8 E4M3: its own rules (_check_fp8)
    if z.dtype != np.int8:
        flag("zero-point-dtype", f"zero point {zp} is {z.dtype}; TensorRT needs signed int8 "
                                 "(rule 1)")
    if np.any(z != 0):
        flag("zero-point-nonzero", f"zero point {zp} is not 0 (max |zp| "
                                   f"{int(np.max(np.abs(z.astype(np.int64))))}); TensorRT INT8 "
                                   "is symmetric (rule 1)")


def _check_weight(dq: onnx.NodeProto, name: str, x: str, consts, prod, readers, flag) -> None:
    """Per-channel checks for a DQ that feeds the weight slot of a weighted op."""
    # the weight is constant data behind the DQ, either int8 directly or float behind a Q
    q = prod.get(x)
    weight = x if x in consts else (q.input[0] if q is not None and q.op_type == "QuantizeLinear"
                                    and q.input and q.input[0] in consts else None)
    if weight is None:
        return
    scale = dq.input[1] if len(dq.input) > 1 else ""
    if scale not in consts:
        return
    w = consts[weight]
    n_scales = consts[scale].size
    if _is_fp8(dq, consts):
        return  # FP8 weights: per tensor (fp8-weight-per-channel), not INT8's rule 3
    for reader in readers.get(dq.output[0], []):
        slot = WEIGHT_SLOT.get(reader.op_type)
        if slot is None or len(reader.input) <= slot or reader.input[slot] != dq.output[0]:
            continue
        if w.ndim < 2:
            continue
        axis = weight_axis(reader.op_type, w.ndim, {"transB": attr(reader, "transB", 0)})
        channels = w.shape[axis]
        if n_scales == 1 and channels > 1:
            flag("weight-per-tensor", f"weight {weight} of {reader.op_type} has one scale for "
                                      f"{channels} output channels; quantize per channel on "
                                      f"axis {axis} (rule 3)")
            continue
        if n_scales > 1:
            for qdq in (dq, q) if q is not None and q.op_type == "QuantizeLinear" else (dq,):
                got = int(attr(qdq, "axis", 1))
                got = got + w.ndim if got < 0 else got
                if got != axis:
                    flag("weight-axis", f"{qdq.op_type} of weight {weight} ({reader.op_type}) "
                                        f"uses axis {got}; the output-channel axis is {axis} "
                                        "(rule 3)")
