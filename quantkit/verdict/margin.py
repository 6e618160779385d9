"""The non-inferiority margin and the checks on verdict options.

A margin is how much of the reference metric the candidate may lose:
``Margin("relative", 0.01)`` allows 1% of the reference value (MLPerf's "99% of FP32"),
``Margin("absolute", 0.005)`` allows 0.005 in metric units. Errors name the config keys
of ``conf/verdict``: ``verdict.margin_kind``, ``verdict.margin``, ``verdict.alpha``,
``verdict.n_boot``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from quantkit.errors import ConfigError

__all__ = ["DELTA_METRICS", "LABELLED_METRICS", "MAP_METRIC_NAMES", "Margin", "check_alpha", "check_n_boot", "margin_abs"]

# Metrics scored against labels: the verdict reads the candidate's paired delta to FP32, a
# relative margin is a fraction of FP32's own score, and a delta's gain is never promised.
LABELLED_METRICS = ("accuracy", "macro_f1")
#: metrics tested as a delta vs FP32 at a margin (relative or absolute): the labelled ones and
#: a detector's mAP (labelled, or label-free against FP32's detections)
MAP_METRIC_NAMES = ("map", "map50", "map75")
DELTA_METRICS = LABELLED_METRICS + MAP_METRIC_NAMES

#: Fewer resamples make the percentile bounds too unstable to sign off on.
MIN_N_BOOT = 100


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Margin:
    """Non-inferiority margin: ``kind`` "relative" (value in (0, 1)) or "absolute" (>= 0)."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in ("relative", "absolute"):
            raise ConfigError("margin kind must be 'relative' or 'absolute'",
                              where="verdict.margin_kind", value=self.kind,
                              fix="set verdict.margin_kind=relative (fraction of the reference "
                                  "metric) or absolute (metric units)")
        if not _is_real(self.value):
            raise ConfigError("margin must be a finite number", where="verdict.margin",
                              value=self.value, fix="set e.g. verdict.margin=0.01")
        if self.kind == "relative" and not 0.0 < self.value < 1.0:
            raise ConfigError("a relative margin must be in (0, 1)", where="verdict.margin",
                              value=self.value,
                              fix="set e.g. verdict.margin=0.01 (lose at most 1% of the "
                                  "reference metric)")
        if self.kind == "absolute" and self.value < 0.0:
            raise ConfigError("an absolute margin must be >= 0", where="verdict.margin",
                              value=self.value, fix="set e.g. verdict.margin=0.005")

    def describe(self, ref_metric: float, metric: str = "metric") -> str:
        """Human text, e.g. "relative 1% of reference accuracy 0.7700 = 0.0077"."""
        m = margin_abs(self, ref_metric)
        if self.kind == "relative":
            return (f"relative {100 * self.value:g}% of reference {metric} "
                    f"{ref_metric:.4f} = {m:.4f}")
        return f"absolute {m:.4f}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": float(self.value)}


def margin_abs(margin: Margin, ref_metric: float) -> float:
    """The margin in metric units: ``value * ref_metric`` if relative, else ``value``.

    Relative 0.01 of a reference accuracy of 0.77 -> 0.0077.
    """
    if not isinstance(margin, Margin):
        raise ConfigError("margin must be a quantkit.verdict.Margin", where="verdict.margin",
                          value=margin, fix="pass Margin('relative', 0.01) or "
                                            "Margin('absolute', 0.005)")
    if margin.kind == "absolute":
        return float(margin.value)
    if not _is_real(ref_metric):
        raise ConfigError("a relative margin needs a finite reference metric",
                          where="verdict.margin", value=ref_metric,
                          fix="check the reference predictions, or use an absolute margin")
    return float(margin.value) * abs(float(ref_metric))


def check_alpha(alpha: Any) -> float:
    """``alpha`` must be in (0, 1); returns it as float."""
    if not _is_real(alpha) or not 0.0 < alpha < 1.0:
        raise ConfigError("alpha must be in (0, 1)", where="verdict.alpha", value=alpha,
                          fix="set e.g. verdict.alpha=0.05 (95% interval)")
    return float(alpha)


def check_n_boot(n_boot: Any) -> int:
    """``n_boot`` must be an integer >= MIN_N_BOOT; returns it as int."""
    if (isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral)
            or n_boot < MIN_N_BOOT):
        raise ConfigError(f"n_boot must be an integer >= {MIN_N_BOOT}", where="verdict.n_boot",
                          value=n_boot, fix="set e.g. verdict.n_boot=2000")
    return int(n_boot)
