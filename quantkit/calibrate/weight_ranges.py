"""Weight ranges: symmetric per-channel max-abs on the output-channel axis (TRT_RULES.md rule 3).

Pure numpy. ``weight_axis`` (defined in :mod:`quantkit.graph.weights`, re-exported here)
says which axis holds the output channels for a weighted op; ``weight_amax_per_channel``
reduces over every other axis.
"""

from __future__ import annotations

import numpy as np

from quantkit.calibrate.calibrators import ALL_ZERO_AMAX
from quantkit.errors import CalibrationError
from quantkit.graph.weights import WEIGHTED_OPS, weight_axis

__all__ = ["weight_axis", "weight_amax_per_channel", "WEIGHTED_OPS"]

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
