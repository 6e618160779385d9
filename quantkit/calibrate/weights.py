"""Weight ranges: symmetric per-channel max-abs on the output-channel axis (TRT_RULES.md rule 3).

Pure numpy. ``weight_axis`` says which axis holds the output channels for a weighted op;
``weight_amax_per_channel`` reduces over every other axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from quantkit.calibrate.calibrators import ALL_ZERO_AMAX
from quantkit.errors import CalibrationError

__all__ = ["weight_axis", "weight_amax_per_channel", "WEIGHTED_OPS"]

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def weight_axis(op_type: str, weight_ndim: int, attrs: Mapping[str, Any] | None = None,
                *, input_index: int = 1) -> int:
    """Output-channel axis (non-negative) of a constant weight feeding ``op_type``.

    Conv: 0 ([M, C/g, k...]); ConvTranspose: 1 ([C, M/g, k...]); Gemm: B [N, K] with
    transB=1 -> 0, B [K, N] -> 1 (a constant A at ``input_index=0``: 0 unless transA=1);
    MatMul: constant B [..., K, N] -> last axis, constant A [..., M, K] -> axis ndim-2.
    """
    attrs = dict(attrs or {})
    if weight_ndim < 1:
        raise CalibrationError("a weight must have at least one dimension",
                               where=f"{op_type} input {input_index}", value=weight_ndim)
    if op_type == "Conv":
        return 0
    if op_type == "ConvTranspose":
        if weight_ndim < 2:
            raise CalibrationError("ConvTranspose weight must be at least 2-D",
                                   where="ConvTranspose input 1", value=weight_ndim)
        return 1
    if op_type == "Gemm":
        if weight_ndim != 2:
            raise CalibrationError("Gemm weight must be 2-D", where=f"Gemm input {input_index}",
                                   value=weight_ndim)
        if input_index == 0:
            return 1 if int(attrs.get("transA", 0)) else 0
        return 0 if int(attrs.get("transB", 0)) else 1
    if op_type == "MatMul":
        if weight_ndim == 1:
            raise CalibrationError("a 1-D MatMul weight has no output-channel axis (GEMV)",
                                   where=f"MatMul input {input_index}", value=weight_ndim,
                                   fix="do not quantize this MatMul (TRT_RULES.md rule 10)")
        return weight_ndim - 2 if input_index == 0 else weight_ndim - 1
    raise CalibrationError("no weight axis rule for this op type", value=op_type,
                           fix=f"quantize weights only for {list(WEIGHTED_OPS)}")


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
