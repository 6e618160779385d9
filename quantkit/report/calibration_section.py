"""The report's calibration section: calibrators and counts, excluded tensors, notes, the
spread of each tensor's range, each calibrator's amax of the compared tensors and, with fp8
in ``precision.formats``, the FP8 E4M3 calibration (``record.calibration.fp8``: its
calibrators, their amax, the calibrators that have no FP8 form and why)."""

from __future__ import annotations

import json

from quantkit.record.calibration import CalibrationRecord
from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import num, text

__all__ = ["calibration"]

#: The calibration facts shown as rows, in this order: (label, value of the record).
FACTS = (("calibrators", lambda c: c.methods), ("calibrated tensors", lambda c: c.tensors),
         ("quantized nodes", lambda c: c.quant_nodes), ("calibration samples", lambda c: c.samples),
         ("calibration pass seconds", lambda c: c.seconds),
         ("ranges loaded from", lambda c: c.loaded_from))


def _amax_rows(amax: dict[str, dict[str, float]]) -> dict[str, object]:
    """Calibrator x tensor amax table: ``{"methods", "rows": [{"tensor", "cells"}]}``."""
    methods = list(amax)
    tensors = list(dict.fromkeys(t for per in amax.values() for t in per))
    return {"methods": methods,
            "rows": [{"tensor": t, "cells": [num(amax[m][t] if t in amax[m] else None, 6)
                                             for m in methods]} for t in tensors]}


def _fp8(cal: CalibrationRecord) -> dict[str, object] | None:
    """The FP8 E4M3 calibration's rows, None when the run wrote no FP8 candidate."""
    fp8 = cal.fp8
    if fp8 is None:
        return None
    return {"methods": text(fp8.methods), "amax": _amax_rows(fp8.amax),
            "skipped": [(k, text(v)) for k, v in (fp8.skipped or {}).items()]}


def calibration(record: RunRecord) -> dict[str, object] | None:
    """The section's rows, None for a record without calibration."""
    cal = record.calibration
    if cal is None:
        return None
    rows = [(label, text(get(cal))) for label, get in FACTS if get(cal) is not None]
    return {"rows": rows,
            "excluded": [(str(k), text(v)) for k, v in cal.excluded.items()],
            "notes": [(str(k), text(v)) for k, v in cal.notes.items()],
            "spread": [(str(k), json.dumps(v, sort_keys=True)) for k, v in (cal.spread or {}).items()],
            "amax": _amax_rows(cal.amax), "fp8": _fp8(cal)}
