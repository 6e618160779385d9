"""The report's metrics section: every recorded metric per candidate with its delta, the
per-class table, the slice x candidate matrix and the slice verdicts."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import (
    DASH,
    NOT_MEASURED,
    finite,
    interval,
    num,
    sig,
    signed,
    text,
)
from quantkit.report.status import verdict_view

__all__ = ["metrics"]


def _label_of(record: RunRecord, slice_name: str, value: str) -> str:
    names = ((record.data.label_names if record.data is not None else None)
             or (record.model.label_names if record.model is not None else None))
    if slice_name == "class" and names and str(value).isdigit() and int(value) < len(names):
        return f"{value} ({names[int(value)]})"
    return str(value)


def _slice_status(record: RunRecord, name: str, status: str | None) -> dict[str, str]:
    """A slice verdict's badge: a dev-only candidate's slices are not signed off either."""
    view = verdict_view(record, name, status)
    return {"status": view.text if status else text(status), "cls": view.cls}


def _slice_matrix(record: RunRecord) -> dict[str, object]:
    """The slice x candidate matrix of the recorded slice metric (accuracy)."""
    cands = record.candidates
    slice_cols = [n for n, c in cands.items() if c.slices]
    slice_keys: list[tuple[str, str]] = []
    for n in slice_cols:
        for s, values in (cands[n].slices or {}).items():
            for val in values:
                if (s, val) not in slice_keys:
                    slice_keys.append((s, val))
    slice_rows = []
    for s, val in slice_keys:
        cells, n_val = [], None
        for n in slice_cols:
            st = cands[n].slice_stat(s, val)
            cells.append(num(st.accuracy if st is not None else None))
            n_val = n_val if n_val is not None else (st.n if st is not None else None)
        slice_rows.append({"slice": s, "value": _label_of(record, s, val), "n": num(n_val),
                           "cells": cells})
    return {"slice_cols": slice_cols, "slice_metric": "accuracy" if slice_keys else DASH,
            "slice_rows": slice_rows}


def _slice_verdicts(record: RunRecord) -> list[dict[str, object]]:
    out = []
    for name, c in record.candidates.items():
        if c.verdict is None or not c.verdict.slices:
            continue
        rows_v = []
        for s in c.verdict.slices:
            t = s.test
            rows_v.append({"slice": f"{s.slice}={s.value}", "n": num(s.n),
                           "ref": num(t.ref if t else None), "cand": num(t.cand if t else None),
                           "delta": interval(t.delta, level=False) if t and t.delta else DASH,
                           "margin": signed(-t.margin_abs) if t and finite(t.margin_abs)
                           else DASH,
                           "p": sig(t.p_noninferiority_holm)
                           if t and t.p_noninferiority_holm is not None else DASH,
                           "p_reg": sig(t.p_regression_holm)
                           if t and t.p_regression_holm is not None else DASH,
                           **_slice_status(record, name, s.status),
                           "reason": text(s.reason) if s.reason else ""})
        out.append({"name": name, "rows": rows_v})
    return out


def metrics(record: RunRecord) -> dict[str, object]:
    """Metric x candidate table, per-class tables, slice matrix, slice verdicts."""
    cands = record.candidates
    metric_names: list[str] = []
    for c in cands.values():
        for k in c.metrics.values():
            if k != "n" and k not in metric_names:
                metric_names.append(k)
    rows = []
    for name, c in cands.items():
        v = c.verdict
        n = c.metrics.value("n")
        rows.append({"name": name, "n": num(n if n is not None else c.n),
                     "values": [num(c.metrics.value(k)) for k in metric_names],
                     "deltas": [interval(v.delta(k), level=False)
                                if v is not None and v.delta(k) is not None else
                                ("reference" if name == "fp32" else NOT_MEASURED)
                                for k in metric_names]})
    per_class = [{"name": name, "rows": [
        {"label": lbl, "precision": num(s.precision), "recall": num(s.recall),
         "f1": num(s.f1), "support": num(s.support)}
        for lbl, s in (c.metrics.per_class or {}).items()]}
        for name, c in cands.items() if c.metrics.per_class]
    notes = [f"{name}: {c.embedding_fp32.note}" for name, c in cands.items()
             if c.embedding_fp32 is not None and c.embedding_fp32.note]
    return {"names": metric_names, "rows": rows, "per_class": per_class, "notes": notes,
            **_slice_matrix(record), "slice_verdicts": _slice_verdicts(record)}
