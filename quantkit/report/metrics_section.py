"""The report's metrics section: every recorded metric per candidate with its delta, the
per-class table, the slice x candidate matrix and the slice verdicts."""

from __future__ import annotations

from typing import Any

from quantkit.record.record_view import RecordView
from quantkit.report.fmt import (
    DASH,
    NOT_MEASURED,
    finite,
    interval,
    is_number,
    num,
    sig,
    signed,
    text,
)
from quantkit.report.status import verdict_view

__all__ = ["metrics"]


def _label_of(record: RecordView, slice_name: str, value: str) -> str:
    names = record.label_names
    if slice_name == "class" and names and str(value).isdigit() and int(value) < len(names):
        return f"{value} ({names[int(value)]})"
    return str(value)


def _slice_status(record: RecordView, name: str, status: Any) -> dict[str, str]:
    """A slice verdict's badge: a dev-only candidate's slices are not signed off either."""
    view = verdict_view(record, name, status)
    return {"status": view.text if status else text(status), "cls": view.cls}


def _slice_matrix(record: RecordView) -> dict[str, Any]:
    """The slice x candidate matrix of the recorded slice metric."""
    cands = record.candidates
    slice_cols = [n for n, c in cands.items() if c.slices]
    slice_keys: list[tuple[str, str]] = []
    slice_metric = None
    for n in slice_cols:
        for s, values in cands[n].slices.items():
            for val, stats in values.items():
                if (s, val) not in slice_keys:
                    slice_keys.append((s, val))
                if slice_metric is None and isinstance(stats, dict):
                    slice_metric = next((k for k in stats if k != "n"), None)
    slice_rows = []
    for s, val in slice_keys:
        cells, n_val = [], None
        for n in slice_cols:
            st = cands[n].slice_stats(s, val)
            cells.append(num(st.get(slice_metric)) if slice_metric else DASH)
            n_val = n_val if n_val is not None else st.get("n")
        slice_rows.append({"slice": s, "value": _label_of(record, s, val), "n": num(n_val),
                           "cells": cells})
    return {"slice_cols": slice_cols, "slice_metric": slice_metric or DASH,
            "slice_rows": slice_rows}


def _slice_verdicts(record: RecordView) -> list[dict[str, Any]]:
    out = []
    for name, c in record.candidates.items():
        if c.verdict is None or not c.verdict.slices_recorded:
            continue
        rows_v = []
        for s in c.verdict.slices:
            rows_v.append({"slice": f"{DASH if s.slice is None else s.slice}="
                                    f"{DASH if s.value is None else s.value}",
                           "n": num(s.n), "ref": num(s.ref), "cand": num(s.cand),
                           "delta": interval(s.delta, level=False) if s.delta else DASH,
                           "margin": signed(-s.margin_abs) if finite(s.margin_abs) else DASH,
                           "p": sig(s.p_noninferiority_holm)
                           if s.p_noninferiority_holm is not None else DASH,
                           "p_reg": sig(s.p_regression_holm)
                           if s.p_regression_holm is not None else DASH,
                           **_slice_status(record, name, s.status),
                           "reason": text(s.reason) if s.reason else ""})
        out.append({"name": name, "rows": rows_v})
    return out


def metrics(record: RecordView) -> dict[str, Any]:
    """Metric x candidate table, per-class tables, slice matrix, slice verdicts."""
    cands = record.candidates
    metric_names: list[str] = []
    for c in cands.values():
        for k, v in c.metrics.items():
            if k != "n" and is_number(v) and k not in metric_names:
                metric_names.append(k)
    rows = []
    for name, c in cands.items():
        v = c.verdict
        rows.append({"name": name, "n": num(c.metric("n", c.n)),
                     "values": [num(c.metric(k)) for k in metric_names],
                     "deltas": [interval(v.delta(k), level=False)
                                if v is not None and v.delta(k) is not None else
                                ("reference" if name == "fp32" else NOT_MEASURED)
                                for k in metric_names]})
    per_class = [{"name": name, "rows": [
        {"label": lbl, "precision": num(s.precision), "recall": num(s.recall),
         "f1": num(s.f1), "support": num(s.support)} for lbl, s in c.per_class.items()]}
        for name, c in cands.items() if c.per_class]
    return {"names": metric_names, "rows": rows, "per_class": per_class,
            **_slice_matrix(record), "slice_verdicts": _slice_verdicts(record)}
