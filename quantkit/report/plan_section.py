"""The report's plan section: precision counts per candidate, each plan's node decisions,
and the kernel census of the deployed graphs."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, num, text

__all__ = ["kernel_census", "plan"]


def plan(record: RunRecord) -> dict[str, object]:
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
        rows.append({"name": name, "counts": [num(counts[p] if p in counts else None)
                                              for p in precisions],
                     "lint": num(c.lint.violations if c.lint is not None else None),
                     "calibrator": text(c.calibrator) if c.calibrator else ""})
        nodes = []
        if c.plan_reasons:  # nodes moved off the default, with why
            fp16, fp8 = set(c.fp16_layers or []), set(c.fp8_layers or [])
            nodes = [{"node": n, "precision": "fp16" if n in fp16 else "fp8" if n in fp8
                      else DASH, "reason": text(r)} for n, r in c.plan_reasons.items()]
        if nodes or c.plan_reasons is not None:
            decisions.append({"name": name, "rows": nodes, "full": False})
    return {"precisions": precisions, "rows": rows, "decisions": decisions}


def kernel_census(record: RunRecord) -> dict[str, object] | None:
    """Op type x candidate counts of the kernels each deployed graph runs."""
    census = {n: c.kernel_census for n, c in record.candidates.items()
              if c.kernel_census is not None}
    if not census:
        return None
    ops = sorted({op for per in census.values() for op in per})
    return {"cols": list(census), "rows": [{"op": op, "cells": [num(per[op] if op in per else None)
                                                                for per in census.values()]}
                                           for op in ops]}
