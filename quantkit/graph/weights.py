"""The weighted ops and their weight axis (TRT_RULES.md rules 3 and 4): one list, one rule.

Bottom layer (no onnx, no I/O): calibration (``calibrate/``), planning (``precision/``),
Q/DQ insertion and lint (``qdq/``) all read these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quantkit.errors import CalibrationError, GraphEditError

__all__ = ["WEIGHTED_OPS", "WEIGHT_SLOT", "BIAS_SLOT", "WEIGHT_INPUTS", "WeightAxisError",
           "weight_axis"]

#: Weighted ops quantized by default (TRT rules 4 and 9: the safe INT8 scope), in the order
#: the default config lists them.
WEIGHTED_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose")

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
