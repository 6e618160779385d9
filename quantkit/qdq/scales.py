"""INT8 scale math and the per-channel axis rule (TRT_RULES.md rules 1-3). numpy only, no I/O.

INT8 is signed and symmetric: ``scale = amax / 127``, zero point 0. Activations get one
scale per tensor; weights of Conv / ConvTranspose / Gemm / MatMul get one scale per output
channel, taken as the max-abs over every axis except the channel axis (the axis rule is
:func:`quantkit.graph.weights.weight_axis`).
"""

from __future__ import annotations

import numpy as np

from quantkit.errors import GraphEditError
from quantkit.graph.grids import INT8_MAX
from quantkit.graph.weights import BIAS_SLOT, WEIGHT_SLOT, weight_amax_per_channel, weight_axis

__all__ = ["INT8_MAX", "BIAS_SLOT", "WEIGHT_SLOT", "weight_axis", "weight_amax_per_channel",
           "int8_scale", "grid_scale", "fake_quantize"]


def int8_scale(amax: float | np.ndarray, *, where: str = "qdq.scales") -> np.ndarray:
    """``amax / 127`` as float32 (shape of ``amax``; 0-d for a per-tensor amax).

    An amax of 0 (a tensor or channel that is all zeros) gets the scale of amax 1.0: every
    scale must be positive (rule 2) and zeros quantize to 0 with any scale. A non-finite or
    negative amax is an error: it would put inf / nan into the engine.
    """
    return grid_scale(amax, INT8_MAX, fmt="INT8", where=where)


def grid_scale(amax: float | np.ndarray, qmax: float, *, fmt: str, where: str) -> np.ndarray:
    """``amax / qmax`` as float32 for the ``fmt`` grid whose largest magnitude is ``qmax``
    (INT8: 127, FP8 E4M3: 448); amax 0 -> the scale of amax 1.0, non-finite or negative
    amax -> one GraphEditError."""
    a = np.asarray(amax, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise GraphEditError("amax must be finite and >= 0", where=where,
                             value=a.tolist() if a.size <= 8 else f"array of {a.size}",
                             fix=f"exclude tensors with non-finite values from {fmt} "
                                 "(TRT rule 9) or recalibrate")
    a = np.where(a > 0, a, 1.0)
    return (a / qmax).astype(np.float32)


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
