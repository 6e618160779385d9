"""quantkit.calibrate: per-tensor INT8 ranges computed by quantkit itself (TensorRT 11 has
no calibrators).

One streaming FP32 pass (``collect_stats``) fills a `HistogramStats` per selected tensor
(``select_tensors``); every calibrator (``CALIBRATORS``: minmax, percentile, entropy,
mse) then computes its amax from the same histograms (``compute_ranges`` -> `Ranges`); the
FP8 E4M3 grid has its own (``FP8_CALIBRATORS``: minmax, percentile, mse on the FP8 grid).
Weights use per-channel max-abs (``weight_amax_per_channel``). ``bootstrap_ranges``
measures how stable each amax is; ``io`` saves Ranges as JSON or a TensorRT cache.

The numpy-only parts import eagerly; names that need onnx (collect) load on first use.
"""

from __future__ import annotations

from typing import Any

from quantkit.calibrate.bootstrap import AmaxSpread, bootstrap_ranges
from quantkit.calibrate.calibrators import (CALIBRATORS, FP8_CALIBRATORS,
                                            Calibrator, EntropyCalibrator, Fp8MseCalibrator,
                                            MinMaxCalibrator, MseCalibrator,
                                            PercentileCalibrator,
                                            make_calibrator, make_calibrators)
from quantkit.calibrate.io import (check_ranges_match, load_ranges, load_stats,
                                   read_trt_calibration_cache, save_ranges, save_stats,
                                   to_trt_calibration_cache)
from quantkit.calibrate.ranges import Ranges, compute_ranges
from quantkit.calibrate.histogram import HistogramStats, combine_stats
from quantkit.graph.grids import ALL_ZERO_AMAX, INT8_MAX
from quantkit.graph.weights import weight_amax_per_channel, weight_axis

_LAZY = {"QuantTarget", "WeightTarget", "select_tensors", "activation_tensors",
         "CollectResult", "collect_stats"}

__all__ = ["HistogramStats", "combine_stats", "Calibrator", "MinMaxCalibrator",
           "PercentileCalibrator", "EntropyCalibrator", "MseCalibrator", "Fp8MseCalibrator",
           "CALIBRATORS", "FP8_CALIBRATORS",
           "make_calibrator", "make_calibrators", "ALL_ZERO_AMAX", "INT8_MAX", "weight_amax_per_channel",
           "weight_axis", "Ranges", "compute_ranges", "AmaxSpread", "bootstrap_ranges",
           "save_ranges", "load_ranges", "save_stats", "load_stats", "check_ranges_match",
           "to_trt_calibration_cache", "read_trt_calibration_cache", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from quantkit.calibrate import collect

        return getattr(collect, name)
    raise AttributeError(f"module 'quantkit.calibrate' has no attribute {name!r}")
