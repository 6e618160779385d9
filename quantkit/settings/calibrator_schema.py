"""calibrator.* schema: the calibration methods and their parameters; calibrator checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import _choice, _positive


CALIBRATOR_NAMES = ("minmax", "percentile", "entropy", "mse")


@dataclass
class CalibratorConfig:
    methods: list[str] = field(default_factory=lambda: list(CALIBRATOR_NAMES))
    percentile: float = 99.99
    num_bins: int = 2048
    num_quant_bins: int = 128
    bootstrap: int = 0  # > 0: recompute ranges on this many bootstrap resamples
    batch_size: int = 16  # calibration batches (small batches keep peak memory low)
    ranges_files: list[str] = field(default_factory=list)  # saved ranges JSON: skip calibration


def validate_calibrator(c: CalibratorConfig) -> None:
    """Calibrator methods, percentile and histogram bins (calibrator.*)."""
    if not c.methods:
        raise ConfigError("config key calibrator.methods is empty", value=[],
                          fix=f"list at least one of {list(CALIBRATOR_NAMES)}")
    for i, m in enumerate(c.methods):
        _choice(f"calibrator.methods[{i}]", m, CALIBRATOR_NAMES)
    if not 0.0 < c.percentile <= 100.0:
        raise ConfigError("config key calibrator.percentile must be in (0, 100]",
                          value=c.percentile, fix="e.g. calibrator.percentile=99.99")
    _positive("calibrator.num_bins", c.num_bins)
    if c.num_bins < 2 * c.num_quant_bins:
        raise ConfigError("config key calibrator.num_bins must be >= 2 x num_quant_bins",
                          value=c.num_bins, fix="e.g. calibrator.num_bins=2048")
    _positive("calibrator.batch_size", c.batch_size)
    _positive("calibrator.bootstrap", c.bootstrap, allow_zero=True)
