"""FP8 E4M3 (``float8e4m3fn``) Q/DQ numerics: the numpy reference. numpy + ml_dtypes, no I/O.

TensorRT defines FP8 quantization as (TensorRT developer guide, "Quantization Schemes",
https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/quantized-types-schemes.html)::

    x_q = quantize(x, s)   = castToFp8(clip(x / s, -448, 448))
    x   = dequantize(x_q, s) = x_q * s

where ``castToFp8`` "rounds to the nearest value representable in FP8E4M3, ties are rounded
to an even number" and ``s`` is a 16- or 32-bit float scale. ONNX QuantizeLinear (opset 19)
with a ``float8e4m3fn`` zero point and ``saturate=1`` (the default) computes the same:
``x / scale`` in float32, round to nearest even, saturate to +-448; NaN stays NaN (E4M3FN has
no infinities; +-inf saturates to +-448). Here ``scale = amax / 448`` (E4M3's largest finite
value), per tensor or per channel. ``tests/qdq/test_fp8.py`` proves bit for bit that ONNX
Runtime's CPU QuantizeLinear / DequantizeLinear (``session.disable_quant_qdq=1``) equal
:func:`quantize_fp8` / :func:`dequantize_fp8`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from quantkit.graph.grids import FP8_E4M3_MAX
from quantkit.qdq.scales import grid_scale

__all__ = ["FP8_E4M3_MAX", "FP8_OPSET", "FP8_DTYPE", "fp8_scale", "fp8_weight_scale",
           "quantize_fp8", "dequantize_fp8", "fake_quantize_fp8"]

#: the first ONNX opset whose QuantizeLinear / DequantizeLinear take float8e4m3fn
FP8_OPSET = 19
#: numpy dtype of FP8 E4M3 data (ONNX TensorProto.FLOAT8E4M3FN).
FP8_DTYPE = np.dtype(ml_dtypes.float8_e4m3fn)


def fp8_scale(amax: float | np.ndarray, *, where: str = "qdq.fp8") -> np.ndarray:
    """``amax / 448`` as float32 (shape of ``amax``). An amax of 0 gets the scale of amax
    1.0 (every scale must be positive); a non-finite or negative amax is an error."""
    return grid_scale(amax, FP8_E4M3_MAX, fmt="FP8", where=where)


def fp8_weight_scale(w: np.ndarray, *, where: str = "qdq.fp8") -> np.ndarray:
    """The per-tensor FP8 scale of a weight (TensorRT's FP8 weight granularity):
    ``max |w| / 448`` as a float32 scalar (:func:`fp8_scale`)."""
    return fp8_scale(float(np.max(np.abs(w), initial=0.0)), where=where)


def _broadcast_scale(scale: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float32)
    if axis is not None and s.ndim == 1 and ndim > 0:
        shape = [1] * ndim
        shape[axis] = -1
        s = s.reshape(shape)
    return s


def quantize_fp8(x: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    """float8e4m3fn values of ``x / scale``: division in float32, saturate to +-448, round
    to nearest even, NaN stays NaN (QuantizeLinear, opset 19, saturate=1)."""
    s = _broadcast_scale(scale, np.ndim(x), axis)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = np.asarray(x, dtype=np.float32) / s
    # clip before the cast: ml_dtypes casts out-of-range values to NaN (E4M3FN has no inf)
    y = np.where(np.isnan(y), y, np.clip(y, -FP8_E4M3_MAX, FP8_E4M3_MAX))
    return y.astype(FP8_DTYPE)


def dequantize_fp8(q: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``float32(q) * scale`` in float32 (DequantizeLinear with a float8e4m3fn input)."""
    s = _broadcast_scale(scale, np.ndim(q), axis)
    return (np.asarray(q, dtype=FP8_DTYPE).astype(np.float32) * s).astype(np.float32)


def fake_quantize_fp8(x: np.ndarray, scale: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Quantize then dequantize ``x`` on the FP8 E4M3 grid (what a Q -> DQ pair computes)."""
    return dequantize_fp8(quantize_fp8(x, scale, axis), scale, axis)
