"""Plan rules for the FP16 remainder: what stays FP32, and why.

**Normalizations stay FP32** (:func:`normalization_fp32_reasons`). TensorRT 11 computes
LayerNormalization in its input dtype (the 10.x FP32 default is gone), so a FP16 artifact
runs the mean / variance of every normalization in FP16, with the epsilon (1e-12 in MiniLM)
below FP16's smallest subnormal. The rule keeps in FP32:

- every node whose op type is in ``op_types`` (:data:`DEFAULT_FP32_OPS`: the normalization
  ops and the mean / sum-of-squares / L2 reductions they are built from);
- the rest of a normalization decomposed into reductions: Sqrt / Reciprocal / Pow reading a kept node, and
  Add / Sub / Mul / Div / Clip / Max reading a kept reduction, Sqrt, Reciprocal or Pow
  (``x - mean``, ``var + eps``, ``(x - mean) / sqrt(var + eps)``), one hop, so the scale
  and shift after it (``* gamma + beta``) and everything downstream stay FP16.

Softmax is not in the default list: TensorRT's FP16 Softmax accumulates in FP32.

**No silent flush of small constants** (:func:`fp16_underflow_reasons`): a float32
constant value that is not negligible within its tensor (above ``max|x| x 2^-11``) but
rounds to 0 in FP16 (|x| < 2^-25, e.g. a 1e-9 / 1e-12 clamp or epsilon), or an ``epsilon``
attribute that small, keeps the node that reads it in FP32, with the reason.

Both return ``node name -> reason`` for ``build_plan(fp32_nodes_reasons=...)``-style use;
they read the graph only. Names follow ``ensure_node_names``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from quantkit.graph.facts import constant_arrays, node_names

__all__ = ["DEFAULT_FP32_OPS", "FP16_FLUSH_BELOW", "normalization_fp32_reasons",
           "fp16_underflow_reasons", "flushes_in_fp16"]

#: Op types kept FP32 in an FP16-remainder plan by default (precision rule; configurable).
DEFAULT_FP32_OPS = ("LayerNormalization", "GroupNormalization", "InstanceNormalization",
                    "RMSNormalization", "SimplifiedLayerNormalization",
                    "SkipLayerNormalization", "ReduceMean", "ReduceSumSquare", "ReduceL2")
#: |x| below this rounds to 0 in FP16 (half of the smallest subnormal, 2^-24).
FP16_FLUSH_BELOW = 2.0 ** -25
_FOLLOW_ANY = frozenset({"Sqrt", "Reciprocal", "Pow"})
_FOLLOW_STRONG = frozenset({"Add", "Sub", "Mul", "Div", "Clip", "Max"})


def normalization_fp32_reasons(model: onnx.ModelProto, *,
                               op_types: Iterable[str] = DEFAULT_FP32_OPS) -> dict[str, str]:
    """Nodes of normalizations (and their decomposed subgraphs) to keep FP32, with reasons."""
    graph = model.graph
    ops = frozenset(op_types)
    names = node_names(graph)
    strong: dict[str, str] = {}  # tensor -> producer op (reductions, Sqrt, Reciprocal, Pow)
    kept: dict[str, str] = {}  # tensor -> producer op (any kept node)
    out: dict[str, str] = {}
    for node, name in zip(graph.node, names):
        op = node.op_type
        reason = None
        if op in ops:
            reason = (f"normalization op {op} kept FP32 (precision rule fp32_ops: TensorRT 11 "
                      f"computes it in its input dtype; FP16 statistics and epsilon lose it)")
        elif op in _FOLLOW_ANY and (src := next((t for t in node.input if t in kept), None)):
            reason = f"{op} inside a normalization (reads {src} of {kept[src]}), kept FP32"
        elif op in _FOLLOW_STRONG and (src := next((t for t in node.input if t in strong), None)):
            reason = f"{op} inside a normalization (reads {src} of {strong[src]}), kept FP32"
        if reason is None:
            continue
        out[name] = reason
        if op in ops and not op.startswith("Reduce"):
            continue  # a whole normalization op: what reads its output is ordinary FP16
        for o in node.output:
            if o:
                kept[o] = op
                if op not in _FOLLOW_STRONG:
                    strong[o] = op
    return out


def flushes_in_fp16(value: np.ndarray) -> bool:
    """True if a float32 constant loses a non-negligible value to 0 in FP16."""
    v = np.asarray(value)
    if v.dtype != np.float32 or v.size == 0:
        return False
    a = np.abs(v)
    tiny = (a > 0) & (a < FP16_FLUSH_BELOW)  # NaN and inf are never tiny
    if not tiny.any():  # the common case, decided in one pass over the constant
        return False
    return float(a[tiny].max()) > float(a[np.isfinite(a)].max()) * 2.0 ** -11


def fp16_underflow_reasons(model: onnx.ModelProto,
                           arrays: Mapping[str, np.ndarray] | None = None) -> dict[str, str]:
    """Nodes reading a constant (or with an ``epsilon``) that FP16 would flush to 0."""
    graph = model.graph
    arrays = constant_arrays(graph) if arrays is None else arrays
    bad = {t for t, v in arrays.items() if flushes_in_fp16(v)}
    out: dict[str, str] = {}
    for node, name in zip(graph.node, node_names(graph)):
        if node.op_type == "Constant":
            continue
        hit = next((t for t in node.input if t in bad), None)
        if hit is not None:
            small = np.abs(np.asarray(arrays[hit], dtype=np.float64))
            small = small[(small > 0) & (small < FP16_FLUSH_BELOW)]
            out[name] = (f"reads constant {hit} ({small.max():.3g}) that FP16 would flush to 0; "
                         f"kept FP32")
            continue
        for a in node.attribute:
            if a.name == "epsilon" and a.type == onnx.AttributeProto.FLOAT \
                    and 0 < abs(a.f) < FP16_FLUSH_BELOW:
                out[name] = f"epsilon {a.f:.3g} would flush to 0 in FP16; kept FP32"
                break
    return out
