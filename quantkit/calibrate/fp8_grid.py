"""The FP8 E4M3 grid's squared error, for the ``mse`` calibrator on FP8 (numpy + ml_dtypes).

An FP8 Q/DQ with ``scale = amax / 448`` maps ``y`` to the nearest float8e4m3fn value of
``y / scale`` (saturating at 448) times ``scale`` (``quantkit/qdq/fp8.py``; TensorRT's
castToFp8). In units ``u = y / scale`` the positive grid is the 127 finite non-negative
E4M3FN values ``g_0 = 0 < g_1 < ... < g_126 = 448``; between neighbours ``g_i`` and
``g_i + d`` the error is ``(u - g_i)`` below the midpoint and ``(u - g_i - d)`` above it
(how ties round does not change an integral), and above 448 every value maps to 448.
:func:`fp8_error_integral` is ``F(x) = integral_0^x (y - Q(y))^2 dy`` in closed form, the
FP8 counterpart of the INT8 sawtooth in ``calibrators._quant_error_integral``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["FP8_GRID", "fp8_error_integral"]

#: the finite non-negative float8e4m3fn values in ascending order (bit patterns 0x00-0x7E)
FP8_GRID = np.arange(0, 0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
FP8_GRID.setflags(write=False)
_TOP = float(FP8_GRID[-1])  # 448
_STEP = np.diff(FP8_GRID)
#: F at each grid point, in units of the scale: sum of d^3 / 12 over the cells below it
_AT_GRID = np.concatenate(([0.0], np.cumsum(_STEP ** 3 / 12.0)))


def fp8_error_integral(x: np.ndarray, amax: np.ndarray) -> np.ndarray:
    """``F(x) = integral_0^x (y - Q(y))^2 dy`` for FP8 E4M3 with ``scale = amax / 448``.

    Broadcasts ``x`` (row, >= 0) against ``amax`` (column, > 0), like the INT8 integral."""
    s = amax / _TOP
    u = x / s
    inside = np.minimum(u, _TOP)
    i = np.clip(np.searchsorted(FP8_GRID, inside, side="right") - 1, 0, _STEP.size - 1)
    d = _STEP[i]
    t = inside - FP8_GRID[i]
    lower = t * t * t / 3.0
    upper = d * d * d / 24.0 + ((t - d) ** 3 + d * d * d / 8.0) / 3.0
    g = _AT_GRID[i] + np.where(t < d / 2.0, lower, upper)
    over = np.maximum(u - _TOP, 0.0)
    g = g + over * over * over / 3.0
    return g * (s * s * s)
