"""An interval of the record (a delta vs FP32 or a test estimate): point, low, high, level."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from quantkit.record.dict_parse import flat_view, view_to_dict

__all__ = ["IntervalView"]


@dataclass(frozen=True)
class IntervalView:
    """``{point, low, high, level}`` of a recorded interval; ``cand`` / ``ref`` the values."""

    point: Any = None
    low: Any = None
    high: Any = None
    level: Any = None
    cand: Any = None
    ref: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> IntervalView:
        return flat_view(cls, d)

    @classmethod
    def parse(cls, d: Any) -> IntervalView | None:
        """The interval of a non-empty recorded mapping, else None (not measured)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in view_to_dict(self).items() if v is not None}
