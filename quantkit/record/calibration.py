"""The calibration of the record (``record.calibration``): counts, calibrators, exclusions,
notes, each calibrator's amax, the range files, the range spread, the activation summaries
of the calibration pass and, with fp8 in ``precision.formats``, the FP8 E4M3 calibration
(``calibration.fp8``), as the calibration stage (run/stages/calibration.py) builds it."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.record.serde import optional

__all__ = ["ActivationSummary", "CalibrationRecord", "Fp8Calibration"]


@dataclass
class ActivationSummary:
    """One calibrated tensor's statistics in the calibration pass (calibrate/histogram.py):
    counts, min / max / amax, mean, std and the |x| percentiles."""

    count: int
    n_nonfinite: int
    n_zero: int
    amax: float
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    p99: float | None
    p99_9: float | None
    p99_99: float | None


@dataclass
class Fp8Calibration:
    """``calibration.fp8``: the FP8 E4M3 calibrators (``fp8.<calibrator>``, scale = amax /
    448, from the same statistics as INT8's), each one's amax, and the configured
    calibrators with no FP8 form, with why (absent when the ranges were loaded from files)."""

    methods: list[str]
    amax: dict[str, dict[str, float]]
    skipped: dict[str, str] | None = optional()


@dataclass(kw_only=True)
class CalibrationRecord:
    """``record.calibration``."""

    tensors: int
    quant_nodes: int
    samples: int
    methods: list[str]
    excluded: dict[str, str]
    notes: dict[str, str]
    amax: dict[str, dict[str, float]]
    files: dict[str, str]
    loaded_from: list[str] | None = optional()  # ranges loaded from calibrator.ranges_files
    spread: dict[str, dict[str, dict[str, float]]] | None = optional()
    summary: dict[str, ActivationSummary]
    seconds: float
    fp8: Fp8Calibration | None = optional()

    def amax_of(self, method: str, tensor: str) -> float | None:
        """The amax calibrator ``method`` chose for ``tensor`` (None when not calibrated)."""
        return self.amax.get(method, {}).get(tensor)
