"""The weighted ops, their weight axis and per-channel weight range (TRT_RULES.md rules 3
and 4): one list, one rule.

Bottom layer (no onnx, no I/O): calibration (``calibrate/``), planning (``precision/``),
Q/DQ insertion and lint (``qdq/``) all read these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from quantkit.errors import CalibrationError, GraphEditError
from quantkit.graph.grids import ALL_ZERO_AMAX

__all__ = ["WEIGHTED_OPS", "FP8_CONSUMERS", "WEIGHT_SLOT", "BIAS_SLOT", "WEIGHT_INPUTS", "WeightAxisError",
           "weight_axis", "weight_amax_per_channel"]

#: Weighted ops quantized by default (TRT rules 4 and 9: the safe INT8 scope), in the order
#: the default config lists them.
WEIGHTED_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose")

#: Ops an FP8 DequantizeLinear may feed: TensorRT runs FP8 in GEMMs (MatMul, Gemm) and
#: convolutions (the lint's ``fp8-consumer`` rule; the plan's FP8 rules).
FP8_CONSUMERS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})

#: Weighted ops and the input slot that holds the weight (rule 4).
WEIGHT_SLOT = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}

#: Weighted ops and the input slot that holds the bias; biases are never quantized.
BIAS_SLOT = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}

#: Inputs of these ops that may carry a constant weight (others are never weights).
WEIGHT_INPUTS = {"Conv": (1,), "ConvTranspose": (1,), "Gemm": (0, 1), "MatMul": (0, 1)}


class WeightAxisError(CalibrationError, GraphEditError):
    """A weight has no per-channel axis: raised where calibration or a graph edit asks."""


def weight_axis(op_type: str, weight_rank: int, attrs: Mapping[str, Any] | None = None,
                *, input_index: int = 1) -> int:
    """Output-channel axis (non-negative) of a constant weight feeding ``op_type`` (rule 3).

    Conv: 0 ([M, C/g, k...]); ConvTranspose: 1 ([C, M/g, k...]); Gemm: B [N, K] with
    transB=1 -> 0, B [K, N] -> 1 (a constant A at ``input_index=0``: 0 unless transA=1);
    MatMul: constant B [..., K, N] -> last axis, constant A [..., M, K] -> axis rank-2.
    ``attrs``: the node's attributes (only transA / transB are read).
    """
    attrs = dict(attrs or {})
    where = f"{op_type} input {input_index}"
    if weight_rank < 1:
        raise WeightAxisError("a weight must have at least one dimension", where=where,
                              value=weight_rank)
    if op_type == "Conv":
        return 0
    if op_type == "ConvTranspose":
        if weight_rank < 2:
            raise WeightAxisError("ConvTranspose weight must be at least 2-D", where=where,
                                  value=weight_rank)
        return 1
    if op_type == "Gemm":
        if weight_rank != 2:
            raise WeightAxisError("Gemm weight must be 2-D", where=where, value=weight_rank)
        if input_index == 0:
            return 1 if int(attrs.get("transA", 0)) else 0
        return 0 if int(attrs.get("transB", 0)) else 1
    if op_type == "MatMul":
        if weight_rank == 1:
            raise WeightAxisError("a 1-D MatMul weight has no output-channel axis (GEMV)",
                                  where=where, value=weight_rank,
                                  fix="do not quantize this MatMul (TRT_RULES.md rule 10)")
        return weight_rank - 2 if input_index == 0 else weight_rank - 1
    raise WeightAxisError("no per-channel weight axis rule for this op type", where=where,
                          value=op_type,
                          fix=f"quantize weights per channel only for {list(WEIGHTED_OPS)}, "
                              "anything else per tensor")


def weight_amax_per_channel(w: np.ndarray, axis: int, *,
                            zero_amax: float = ALL_ZERO_AMAX) -> np.ndarray:
    """max |w| over every axis but ``axis`` (float32, shape ``[w.shape[axis]]``).

    All-zero channels get ``zero_amax`` (any positive scale represents zeros exactly).
    Raises CalibrationError on non-finite weights.
    """
    w = np.asarray(w)
    if w.ndim == 0:
        raise CalibrationError("weight must have at least one dimension", value=w.shape)
    if not -w.ndim <= axis < w.ndim:
        raise CalibrationError("weight axis out of range", value=(axis, w.shape))
    axis %= w.ndim
    if not np.issubdtype(w.dtype, np.floating):
        w = w.astype(np.float32)
    if not np.isfinite(w).all():
        n = int(w.size - np.count_nonzero(np.isfinite(w)))
        raise CalibrationError(f"weight has non-finite values (n={n})", value=w.shape,
                               fix="check the model's weights; do not quantize this node")
    if w.shape[axis] == 0:
        return np.zeros(0, dtype=np.float32)
    others = tuple(i for i in range(w.ndim) if i != axis)
    if w.size == 0:
        return np.full(w.shape[axis], zero_amax, dtype=np.float32)
    amax = np.abs(w).max(axis=others).astype(np.float32) if others else \
        np.abs(w).astype(np.float32)
    amax[amax == 0] = zero_amax
    return amax
