"""The quantization grids' fixed numbers (TRT_RULES.md rules 1-2): one place for each.

INT8 is signed and symmetric, ``scale = amax / INT8_MAX``; FP8 E4M3 (float8e4m3fn) has
``scale = amax / FP8_E4M3_MAX``. Bottom layer: calibration, Q/DQ insertion and the PTQ
steps read these.
"""

from __future__ import annotations

__all__ = ["INT8_MAX", "FP8_E4M3_MAX", "ALL_ZERO_AMAX"]

#: Largest magnitude of signed, symmetric INT8 (TRT rule 1: range [-128, 127], zero point 0).
INT8_MAX = 127
#: Largest finite float8e4m3fn magnitude (S.1111.110 = 1.75 * 2**8).
FP8_E4M3_MAX = 448.0
#: amax used for a tensor or channel whose values were all zero (any positive scale is exact).
ALL_ZERO_AMAX = 1.0
