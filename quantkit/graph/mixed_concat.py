"""Concats whose inputs must never share one quantization scale (issue 46).

A per-tensor scale after a Concat is one scale for every input: TensorRT moves a
QuantizeLinear backward through a Concat (TRT_RULES.md rule 7: Q backward, DQ forward
through commuting ops; ModelOpt counts Concat among its copy ops), so one Q/DQ after the
Concat quantizes each input with the widest input's scale, whatever the ONNX file says.
An input whose amax is ``1/r`` of the widest keeps ``127/r`` of INT8's 127 steps: box
coordinates in pixels (amax ~700) beside class scores (0..1) leave the scores 0.18 of a
step, so every score rounds to 0 (ultralytics PR 25524, mmyolo 776, YOLOv6 969); channels
whose ranges differ ~20,000x cost -42 AP (Tencent/YOLO-Master PR 300).

:func:`mixed_concats` names every tensor that carries such a Concat's output: the output of a
Concat whose inputs' amax differ by more than a ratio (default
:data:`DEFAULT_CONCAT_RANGE_RATIO`), or that joins score-like inputs (a Sigmoid / Softmax
output) with box-like ones (any other input, unless its known amax stays within the scores'
[0, 1]), and the tensors that copy it (:data:`CARRYING_OPS`, nested Concats). The plan keeps
every reader of such a tensor out of INT8 / FP8 (``precision/plan.py``) and the lint names a
Q/DQ on one (``qdq/lint.py``, rule ``concat-shared-scale``); an INT8 Concat itself is fine:
each of its inputs gets its own per-tensor Q/DQ before it.

The default ratio 16 leaves the narrowest input at most ~8 INT8 steps (3 of INT8's 7 bits):
below that it no longer is an INT8 tensor; feature Concats whose inputs are within a few x
of each other (FPN / CSP necks) stay INT8.

Bottom layer: imports onnx, numpy and quantkit.errors / quantkit.graph only; never edits the
graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from quantkit.errors import ConfigError
from quantkit.graph.facts import constant_tensors, node_names, producers
from quantkit.graph.grids import FP8_E4M3_MAX, INT8_MAX

__all__ = ["DEFAULT_CONCAT_RANGE_RATIO", "SCORE_OPS", "CARRYING_OPS", "ConcatInput",
           "MixedConcat", "mixed_concats", "concat_inputs_read_by", "check_concat_range_ratio"]

#: widest / narrowest input amax above which a Concat's inputs may not share one scale
DEFAULT_CONCAT_RANGE_RATIO = 16.0
#: ops whose output is a score in [0, 1]
SCORE_OPS = frozenset({"Sigmoid", "Softmax"})
#: the range a score lies in: a box-like input with a known amax above it is another meaning
SCORE_AMAX = 1.0
#: ops whose output (of their first input) holds the same elements with the same meaning:
#: layout changes, casts, and the pooling / resampling TensorRT commutes Q/DQ through
CARRYING_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                          "Cast", "MaxPool", "Resize"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
_FP8 = np.dtype(ml_dtypes.float8_e4m3fn)


def check_concat_range_ratio(value: object, *, where: str) -> float:
    """``value`` as the ratio: a finite number > 1, else ConfigError naming ``where``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(float(value)) and float(value) > 1.0
    if not ok:
        raise ConfigError("concat_range_ratio must be a finite number > 1 (the widest / "
                          "narrowest input amax a Concat may quantize under one scale)",
                          where=where,
                          value=value,
                          fix=f"use e.g. {DEFAULT_CONCAT_RANGE_RATIO:g} (the default: the "
                              "narrowest input keeps ~8 of INT8's 127 steps)")
    return float(value)


@dataclass(frozen=True)
class ConcatInput:
    """One input of a Concat (named as before any Cast), its amax (None when unknown) and,
    when it is score-like, the op that made it (Sigmoid / Softmax)."""

    tensor: str
    amax: float | None
    score_op: str | None

    def describe(self) -> str:
        amax = f"amax {self.amax:.4g}" if self.amax is not None else "amax unknown"
        return f"{self.tensor} ({amax}{', ' + self.score_op + ' score' if self.score_op else ''})"


@dataclass(frozen=True)
class MixedConcat:
    """A Concat whose inputs must not share one scale, and why: ``ratio`` (widest / narrowest
    known positive amax) above ``limit``, and / or ``box_score`` (score-like inputs beside
    box-like ones)."""

    concat: str
    inputs: tuple[ConcatInput, ...]
    ratio: float | None
    limit: float
    box_score: bool

    @property
    def range_ratio(self) -> bool:
        return self.ratio is not None and self.ratio > self.limit

    def describe(self) -> str:
        """One clause: the Concat, its inputs with their ranges, and why they cannot share."""
        why = []
        if self.range_ratio:
            why.append(f"their ranges differ {self.ratio:.4g}x (> concat_range_ratio "
                       f"{self.limit:g}; one scale leaves the narrowest "
                       f"{INT8_MAX / self.ratio:.2g} of INT8's {INT8_MAX} steps)")
        if self.box_score:
            why.append("it joins box-like and score-like inputs")
        return (f"Concat {self.concat} joins {', '.join(i.describe() for i in self.inputs)}: "
                f"{' and '.join(why)}")


def mixed_concats(graph: onnx.GraphProto, amax: Mapping[str, float], *,
                  ratio: float = DEFAULT_CONCAT_RANGE_RATIO) -> dict[str, MixedConcat]:
    """tensor -> the :class:`MixedConcat` it carries, for every tensor of ``graph`` (a FP32 or a
    Q/DQ graph) holding a mixed Concat's output: the Concat's outputs, the outputs of
    :data:`CARRYING_OPS` reading one, and of Concats reading one (nested: the inner Concat is
    named). ``amax``: calibrated amax per tensor; an input without one takes it through
    casts, layout ops and Q/DQ (a DequantizeLinear's scalar scale times its grid's largest
    value), a float constant its own max |value|; otherwise it is unknown."""
    limit = check_concat_range_ratio(ratio, where="concat_range_ratio")
    out: dict[str, MixedConcat] = {}
    if not any(n.op_type == "Concat" for n in graph.node):
        return out
    walk = _Walk(graph, amax)
    for node, name in zip(graph.node, node_names(graph)):
        if node.op_type == "Concat":
            inputs = [t for t in node.input if t]
            found = next((out[t] for t in inputs if t in out), None) \
                or _judge(name, inputs, walk, limit)
        elif node.op_type in CARRYING_OPS and node.input and node.input[0] in out:
            found = out[node.input[0]]
        else:
            continue
        if found is not None:
            out.update({o: found for o in node.output if o})
    return out


def concat_inputs_read_by(graph: onnx.GraphProto, tensors: Iterable[str]) -> list[str]:
    """The non-constant inputs of every Concat whose output ``tensors`` read (directly, through
    :data:`CARRYING_OPS` or nested Concats), in first-seen order: what calibration must
    range so :func:`mixed_concats` can judge the ratio."""
    prod = producers(graph)
    consts = constant_tensors(graph)
    out: dict[str, None] = {}
    seen: set[str] = set()
    todo = list(tensors)
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.add(t)
        node = prod.get(t)
        if node is None:
            continue
        if node.op_type == "Concat":
            for i in node.input:
                if i and i not in consts:
                    out.setdefault(i)
                    todo.append(i)
        elif node.op_type in CARRYING_OPS and node.input:
            todo.append(node.input[0])
    return list(out)


class _Walk:
    """Backward walks from a Concat input to what it stands for (its amax, its score op)."""

    def __init__(self, graph: onnx.GraphProto, amax: Mapping[str, float]) -> None:
        self.prod = producers(graph)
        self.consts = constant_tensors(graph)  # read on demand: weights stay protobuf
        self.amax = amax

    def _const(self, t: str) -> np.ndarray | None:
        proto = self.consts.get(t)
        return numpy_helper.to_array(proto) if proto is not None else None

    def _sources(self, t: str):
        """``t``, then each tensor it was copied from through carrying ops and Q/DQ."""
        seen: set[str] = set()
        while t and t not in seen:
            seen.add(t)
            yield t
            node = self.prod.get(t)
            if node is None or not node.input or (node.op_type not in CARRYING_OPS
                                                   and node.op_type not in _QDQ):
                return
            t = node.input[0]

    def amax_of(self, t: str) -> float | None:
        for s in self._sources(t):
            if s in self.amax and math.isfinite(float(self.amax[s])):
                return float(self.amax[s])
            value = self._const(s)
            if value is not None and value.dtype.kind == "f" and value.size:
                return float(np.max(np.abs(value.astype(np.float64))))
            node = self.prod.get(s)
            if node is not None and node.op_type == "DequantizeLinear":
                scaled = self._dq_amax(node)
                if scaled is not None:
                    return scaled
        return None

    def _dq_amax(self, dq: onnx.NodeProto) -> float | None:
        scale = self._const(dq.input[1]) if len(dq.input) > 1 else None
        if scale is None or scale.size != 1:
            return None
        zp = self._const(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
        grid = (FP8_E4M3_MAX if zp is not None and zp.dtype == _FP8
                else 255.0 if zp is None or zp.dtype == np.uint8 else float(INT8_MAX))
        return float(abs(scale.reshape(-1)[0].astype(np.float64))) * grid

    def uncast(self, t: str) -> str:
        """The tensor ``t`` is a Cast of (an FP16 graph's boundary casts), else ``t``."""
        node = self.prod.get(t)
        while node is not None and node.op_type == "Cast" and node.input:
            t = node.input[0]
            node = self.prod.get(t)
        return t

    def score_op(self, t: str) -> str | None:
        for s in self._sources(t):
            node = self.prod.get(s)
            if node is not None and node.op_type in SCORE_OPS:
                return node.op_type
        return None


def _judge(name: str, inputs: list[str], walk: _Walk, limit: float) -> MixedConcat | None:
    if len(inputs) < 2:
        return None
    described = tuple(ConcatInput(walk.uncast(t), walk.amax_of(t), walk.score_op(t))
                      for t in inputs)
    known = [i.amax for i in described if i.amax is not None and i.amax > 0]
    ratio = max(known) / min(known) if len(known) >= 2 else None
    scores = [i for i in described if i.score_op]
    boxes = [i for i in described if not i.score_op
             and (i.amax is None or i.amax > SCORE_AMAX)]
    found = MixedConcat(name, described, ratio, limit, bool(scores and boxes))
    return found if found.range_ratio or found.box_score else None
