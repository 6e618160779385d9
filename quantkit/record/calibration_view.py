"""The calibration of the record (``record.calibration``): calibrators, counts, exclusions,
notes, the range spread, the activation summaries, each calibrator's amax, range files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, view_to_dict

__all__ = ["ActivationSummary", "CalibrationView"]

#: The calibration facts shown as rows, when recorded: key -> label.
FACT_LABELS = (("methods", "calibrators"), ("tensors", "calibrated tensors"),
               ("quant_nodes", "quantized nodes"), ("samples", "calibration samples"))


@dataclass(frozen=True)
class ActivationSummary(FlatView):
    """One calibrated tensor's |x| percentiles, maximum, std and count (the calibration pass)."""

    p99: Any = None
    p99_9: Any = None
    p99_99: Any = None
    amax: Any = None
    std: Any = None
    count: Any = "?"


@dataclass(frozen=True)
class CalibrationView:
    """``record.calibration``; ``facts`` keeps the recorded subset of FACT_LABELS' keys."""

    facts: dict[str, Any] = field(default_factory=dict)
    excluded: dict[str, Any] = field(default_factory=dict)
    notes: Any = None  # a dict (key -> note) or a list of notes
    spread: Any = None
    summary: dict[str, ActivationSummary] = field(default_factory=dict)
    amax: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> CalibrationView:
        d = mapping(d)
        notes = d.get("notes")
        return cls(facts={k: d[k] for k, _ in FACT_LABELS if k in d},
                   excluded=mapping(d.get("excluded")),
                   notes=dict(notes) if isinstance(notes, Mapping) else list(notes or []),
                   spread=d.get("spread") or {},
                   summary={str(t): ActivationSummary.from_dict(s)
                            for t, s in mapping(d.get("summary")).items()},
                   amax={str(m): mapping(a) for m, a in mapping(d.get("amax")).items()},
                   files=mapping(d.get("files")))

    @classmethod
    def parse(cls, d: Any) -> CalibrationView | None:
        """The calibration of a non-empty recorded mapping, else None (not calibrated)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    def fact_rows(self) -> list[tuple[str, Any]]:
        """(label, value) of each recorded calibration fact, in FACT_LABELS order."""
        return [(label, self.facts[k]) for k, label in FACT_LABELS if k in self.facts]

    def amax_of(self, method: str, tensor: str) -> Any:
        """The amax calibrator ``method`` chose for ``tensor`` (None when not calibrated)."""
        return self.amax[method][tensor] if tensor in self.amax[method] else None

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        return {**d.pop("facts"), **d}
