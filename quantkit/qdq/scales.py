"""INT8 scale math and the per-channel axis rule (TRT_RULES.md rules 1-3). numpy only, no I/O.

INT8 is signed and symmetric: ``scale = amax / 127``, zero point 0. Activations get one
scale per tensor; weights of Conv / ConvTranspose / Gemm / MatMul get one scale per output
channel, taken as the max-abs over every axis except the channel axis.
"""

from __future__ import annotations

import numpy as np

from quantkit.errors import GraphEditError

#: Largest magnitude of signed, symmetric INT8 (TRT rule 1: range [-128, 127], zero point 0).
INT8_MAX = 127

#: Weighted ops and the input slot that holds the weight (rule 4).
WEIGHT_SLOT = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}

#: Weighted ops and the input slot that holds the bias; biases are never quantized.
BIAS_SLOT = {"Conv": 2, "ConvTranspose": 2, "Gemm": 2}


def weight_axis(op_type: str, weight_rank: int, *, trans_b: int = 0) -> int:
    """The output-channel axis of a weight (TRT rule 3), as a non-negative axis.

    Conv: 0 ([C_out, C_in/g, k...]); ConvTranspose: 1 ([C_in, C_out/g, k...]);
    Gemm: 0 with transB=1 ([N, K], PyTorch Linear), else 1 ([K, N]);
    MatMul: the last axis (N of [K, N]; also for batched weights [..., K, N]).
    """
    if op_type == "Conv":
        axis = 0
    elif op_type == "ConvTranspose":
        axis = 1
    elif op_type == "Gemm":
        axis = 0 if trans_b else 1
    elif op_type == "MatMul":
        axis = weight_rank - 1
    else:
        raise GraphEditError("no per-channel weight axis is defined for this op type",
                             where="qdq.scales.weight_axis", value=op_type,
                             fix="quantize the weights of Conv, ConvTranspose, Gemm or MatMul "
                                 "per channel, and anything else per tensor")
    if not 0 <= axis < max(weight_rank, 1):
        raise GraphEditError(f"{op_type} weight of rank {weight_rank} has no axis {axis}",
                             where="qdq.scales.weight_axis", value=weight_rank,
                             fix="check the weight's shape; per-channel weights need rank >= 2")
    return axis


def per_channel_amax(weight: np.ndarray, axis: int) -> np.ndarray:
    """Max-abs of ``weight`` over every axis except ``axis``: one value per channel (float32)."""
    w = np.abs(np.asarray(weight, dtype=np.float32))
    if w.ndim == 0:
        return w.reshape(1)
    other = tuple(a for a in range(w.ndim) if a != axis)
    return np.max(w, axis=other) if other else w


def int8_scale(amax: float | np.ndarray, *, where: str = "qdq.scales") -> np.ndarray:
    """``amax / 127`` as float32 (shape of ``amax``; 0-d for a per-tensor amax).

    An amax of 0 (a tensor or channel that is all zeros) gets the scale of amax 1.0: every
    scale must be positive (rule 2) and zeros quantize to 0 with any scale. A non-finite or
    negative amax is an error: it would put inf / nan into the engine.
    """
    a = np.asarray(amax, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise GraphEditError("amax must be finite and >= 0", where=where,
                             value=a.tolist() if a.size <= 8 else f"array of {a.size}",
                             fix="exclude tensors with non-finite values from INT8 "
                                 "(TRT rule 9) or recalibrate")
    a = np.where(a > 0, a, 1.0)
    return (a / INT8_MAX).astype(np.float32)


def fake_quantize(x: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Quantize then dequantize ``x`` like ORT/TensorRT do (round half to even, saturate)."""
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None and s.ndim == 1:
        shape = [1] * x.ndim
        shape[axis] = -1
        s = s.reshape(shape)
    q = np.clip(np.rint(np.asarray(x, dtype=np.float32) / s), -128, INT8_MAX)
    return (q * s).astype(np.float32)


def quantize_weight(w: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    """int8 values of ``w`` as QuantizeLinear computes them: ``saturate(rint(w / scale))``,
    the division in float32, round half to even (the data of a weight's DequantizeLinear)."""
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None and s.ndim == 1:
        shape = [1] * np.ndim(w)
        shape[axis] = -1
        s = s.reshape(shape)
    q = np.rint(np.asarray(w, dtype=np.float32) / s)
    return np.clip(q, -128, INT8_MAX).astype(np.int8)
