"""The report's plan section: precision counts per candidate, each plan's node decisions,
and the kernel census of the deployed graphs."""

from __future__ import annotations

from typing import Any

from quantkit.record.record_view import RecordView
from quantkit.report.fmt import DASH, num, text

__all__ = ["kernel_census", "plan"]


def plan(record: RecordView) -> dict[str, Any]:
    """Precision counts per candidate and, per plan, its node -> precision, reason rows."""
    cands = record.candidates
    rows, decisions = [], []
    precisions: list[str] = []
    for c in cands.values():
        for p in c.plan_counts or {}:
            if p not in precisions:
                precisions.append(p)
    for name, c in cands.items():
        counts = c.plan_counts
        if counts is None:
            continue
        rows.append({"name": name, "counts": [num(c.plan_count(p)) for p in precisions],
                     "lint": num(c.lint_violations),
                     "calibrator": text(c.calibrator) if c.calibrator else ""})
        nodes = []
        if c.plan_decisions is not None:  # full plan: node -> {precision, reason}
            nodes = [{"node": n, "precision": text(d.precision), "reason": text(d.reason)}
                     for n, d in c.plan_decisions.items()]
        elif c.plan_reasons:  # nodes moved off the default, with why
            fp16 = set(c.fp16_layers)
            nodes = [{"node": n, "precision": "fp16" if n in fp16 else DASH, "reason": text(r)}
                     for n, r in c.plan_reasons.items()]
        if nodes or c.plan_reasons is not None:
            decisions.append({"name": name, "rows": nodes, "full": c.has_plan})
    return {"precisions": precisions, "rows": rows, "decisions": decisions}


def kernel_census(record: RecordView) -> dict[str, Any] | None:
    """Op type x candidate counts of the kernels each deployed graph runs."""
    cols = [n for n, c in record.candidates.items() if c.kernel_census is not None]
    if not cols:
        return None
    ops = sorted({op for n in cols for op in record.candidates[n].kernel_census})
    return {"cols": cols, "rows": [{"op": op, "cells": [num(record.candidates[n].census_count(op))
                                                        for n in cols]} for op in ops]}
