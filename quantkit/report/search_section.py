"""The report's precision-search section: the summary, every evaluation, the Pareto front,
the proxy ranking; every status of the search is a dev status."""

from __future__ import annotations

from typing import Any

from quantkit.record.record_view import RecordView
from quantkit.record.search_view import SearchEval
from quantkit.report.fmt import (
    DASH,
    finite,
    is_number,
    num,
    sig,
    signed,
    status_class,
    text,
    value_text,
)
from quantkit.report.plots import search_margin
from quantkit.report.status import DEV_CLASS, signed_candidates

__all__ = ["search"]

#: Search summary fields shown first, in this order, with their labels.
SEARCH_FIELDS = (("calibrator", "searched from"), ("status", "status of the set found"),
                 ("reason", "why it stopped"), ("k", "smallest passing prefix (k)"),
                 ("metric", "metric of the set found"), ("interval", "its interval"),
                 ("full_evals", "full evaluations"), ("bound", "evaluation bound"),
                 ("full_evals_linear", "evaluations a linear scan would need"),
                 ("num_layers", "INT8 layers searched"),
                 ("quantizable_layers", "quantizable layers"),
                 ("budget_exhausted", "budget exhausted"), ("seconds", "seconds"))


def _fp16_text(x: Any) -> str:
    return ", ".join(str(n) for n in x) if isinstance(x, (list, tuple)) else text(x)


def _metric(e: SearchEval) -> str:
    return signed(e.value) if finite(e.value) else DASH


def search(record: RecordView) -> dict[str, Any] | None:
    """The search section's rows, ``{"skipped": why}``, or None when no search ran."""
    s = record.search
    if s is None:
        return None
    if s.skipped:
        return {"skipped": text(s.skipped)}
    metric_name, _ = search_margin(s.evaluations)
    metric_label = f"{metric_name} delta vs FP32" if metric_name else "metric"
    summary = [(label.replace("metric", metric_label), value_text(s.summary[k]))
               for k, label in SEARCH_FIELDS if k in s.summary]
    known = {k for k, _ in SEARCH_FIELDS}
    summary += [(k, value_text(v)) for k, v in s.summary.items() if k not in known]
    signed_off = signed_candidates(record)
    on_dev = signed_off is not None  # the search chooses on dev only

    def badge(st: Any) -> dict[str, str]:
        if on_dev and st:
            return {"status": f"{text(st)} on dev", "cls": DEV_CLASS}
        return {"status": text(st), "cls": status_class(st)}

    evals = []
    for e in s.evaluations:
        iv = e.bounds
        evals.append({"i": e.index, "phase": text(e.phase), "k": num(e.k), "count": num(e.count),
                      **badge(e.status), "metric": _metric(e),
                      "interval": f"[{signed(iv[0])}, {signed(iv[1])}]" if iv else DASH,
                      "seconds": num(e.seconds, 1), "fp16_set": _fp16_text(e.fp16_set or [])})
    pareto = []
    for p in s.pareto:
        if isinstance(p, SearchEval):
            pareto.append({"count": num(p.count), "metric": _metric(p), **badge(p.status),
                           "index": num(p.index), "fp16_set": _fp16_text(p.fp16_set or [])})
        else:
            pareto.append({"count": DASH, "metric": DASH, "status": DASH, "cls": "other",
                           "index": text(p), "fp16_set": ""})
    found = s.fp16_nodes
    found_list = [str(n) for n in found] if isinstance(found, (list, tuple)) else []
    proxy_cols: list[str] = []
    for v in s.proxy.values():
        for k, x in v.items():
            if is_number(x) and k not in proxy_cols:
                proxy_cols.append(k)
    ranking = []
    for r, node in enumerate(s.ranking, 1):
        scores = [s.proxy_score(node, k) for k in proxy_cols]
        ranking.append({"rank": r, "node": str(node),
                        "cells": [sig(x, 4) if is_number(x) else DASH for x in scores],
                        "found": str(node) in found_list})
    mixed_signed = "mixed" in (signed_off or ())
    head = badge(s.status)
    if on_dev and s.status and not mixed_signed:
        head["status"] += "; not signed off"
    return {"summary": summary, **head,
            "found": found_list, "pruned": [str(n) for n in s.pruned],
            "evaluations": evals, "pareto": pareto, "ranking": ranking, "proxy_cols": proxy_cols,
            "metric_label": metric_label}
