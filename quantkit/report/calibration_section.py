"""The report's calibration section: calibrators and counts, excluded tensors, notes, and the
spread of each tensor's range (``record.calibration``)."""

from __future__ import annotations

import json
from typing import Any

from quantkit.record.record_view import RecordView
from quantkit.report.fmt import text

__all__ = ["calibration"]


def calibration(record: RecordView) -> dict[str, Any] | None:
    """The section's rows, None for a record without calibration."""
    cal = record.calibration
    if cal is None:
        return None
    rows = [(label, text(v)) for label, v in cal.fact_rows()]
    excluded = [(str(k), text(v)) for k, v in cal.excluded.items()]
    notes = [(str(k), text(v)) for k, v in cal.notes.items()] if isinstance(cal.notes, dict) \
        else [("", text(n)) for n in cal.notes]
    spread = cal.spread
    spread_rows = [(str(k), json.dumps(v, sort_keys=True) if not isinstance(v, str) else v)
                   for k, v in spread.items()] if isinstance(spread, dict) else []
    return {"rows": rows, "excluded": excluded, "notes": notes, "spread": spread_rows}
