"""The report's precision-search section: the summary, every evaluation, the Pareto front,
the proxy ranking; every status of the search is a dev status."""

from __future__ import annotations

from dataclasses import fields

from quantkit.record.run_record import RunRecord
from quantkit.record.search import (
    FormatFill,
    FormatFillSkipped,
    ParetoPoint,
    SearchEval,
    SearchRecord,
    SearchSkipped,
)
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

__all__ = ["format_fill", "search"]

#: Search summary fields shown first, in this order, with their labels.
SEARCH_FIELDS = (("calibrator", "searched from"), ("status", "status of the set found"),
                 ("reason", "why it stopped"), ("k", "smallest passing prefix (k)"),
                 ("metric", "metric of the set found"), ("interval", "its interval"),
                 ("full_evals", "full evaluations"), ("bound", "evaluation bound"),
                 ("full_evals_linear", "evaluations a linear scan would need"),
                 ("num_layers", "INT8 layers searched"),
                 ("quantizable_layers", "quantizable layers"),
                 ("budget_exhausted", "budget exhausted"), ("seconds", "seconds"))


#: The search's lists, shown as tables of their own rather than summary rows.
SEARCH_LISTS = ("evaluations", "pareto", "fp16_nodes", "pruned", "ranking", "proxy")


def _fp16_text(x: list[str]) -> str:
    return ", ".join(str(n) for n in x)


def _metric(e: SearchEval | ParetoPoint) -> str:
    return signed(e.metric) if finite(e.metric) else DASH


def _halves(s: SearchRecord) -> str:
    """How dev was split for the search: the two halves' sizes, or why it was not split."""
    h = s.dev_halves
    if h is None or not h.split:
        return f"not split: {text(h.reason if h is not None else None)}"
    return (f"chosen on {h.selection_n} examples, confirmed on the other {h.confirmation_n}: "
            f"{text(h.reason)}")


def _fill_text(s: SearchRecord) -> str:
    fill = s.format_fill
    if isinstance(fill, FormatFill):
        return f"ran: {text(fill.status)} with {len(fill.fp8_layers)} layer(s) in FP8 (below)"
    return f"not run: {text(fill.why)}" if fill is not None else DASH


def _cost_text(s: SearchRecord) -> str:
    c = s.measure_cost
    if c is None:
        return "not measured"
    return (f"mode {text(c.mode)}: {c.evaluations} subset evaluation(s) in {num(c.seconds, 2)} s "
            f"(baseline damage {sig(c.baseline, 4)})")


#: How the search's nested summary fields read as one row (the lists have tables of their own).
NESTED = {"confirmation": lambda s: (f"{len(s.confirmation)} set(s) read again on the other half "
                                     "of dev (below)" if s.confirmation else "none"),
          "format_fill": _fill_text,
          "measured": lambda s: (f"{len(s.measured)} layer(s) measured (damage in the ranking)"
                                 if s.measured else "none"),
          "proxy_remeasured_tensors": lambda s: ", ".join(s.proxy_remeasured_tensors or [])
          or "none",
          "dev_halves": _halves, "measure_cost": _cost_text}


def _summary(s: SearchRecord) -> list[tuple[str, str]]:
    """(field, text) of every summary field of the search (not its lists), in record order;
    the fields a record of its time lacks are left out."""
    rows = []
    for f in fields(s):
        if f.name in SEARCH_LISTS:
            continue
        value = getattr(s, f.name)
        if f.name in NESTED:
            if value is not None or f.name in ("measure_cost",):
                rows.append((f.name, NESTED[f.name](s)))
            continue
        rows.append((f.name, value_text(value)))
    return rows


def search(record: RunRecord) -> dict[str, object] | None:
    """The search section's rows, ``{"skipped": why}``, or None when no search ran."""
    s = record.search
    if s is None:
        return None
    if isinstance(s, SearchSkipped):
        return {"skipped": text(s.skipped)}
    metric_name, _ = search_margin(s.evaluations)
    metric_label = f"{metric_name} delta vs FP32" if metric_name else "metric"
    values = dict(_summary(s))
    summary = [(label.replace("metric", metric_label), values[k])
               for k, label in SEARCH_FIELDS if k in values]
    known = {k for k, _ in SEARCH_FIELDS}
    summary += [(k, v) for k, v in values.items() if k not in known]
    signed_off = signed_candidates(record)
    on_dev = signed_off is not None  # the search chooses on dev only

    def badge(st: str | None) -> dict[str, str]:
        if on_dev and st:
            return {"status": f"{text(st)} on dev", "cls": DEV_CLASS}
        return {"status": text(st), "cls": status_class(st)}

    evals = []
    for i, e in enumerate(s.evaluations):
        iv = e.bounds
        evals.append({"i": e.index if e.index is not None else i, "phase": text(e.phase),
                      "k": num(e.k), "count": num(e.fp16_count),
                      **badge(e.status), "metric": _metric(e),
                      "interval": f"[{signed(iv[0])}, {signed(iv[1])}]" if iv else DASH,
                      "seconds": num(e.seconds, 1), "fp16_set": _fp16_text(e.fp16_set)})
    confirmation = [{"count": num(e.fp16_count), **badge(e.status), "metric": _metric(e),
                     "interval": f"[{signed(e.bounds[0])}, {signed(e.bounds[1])}]"
                     if e.bounds else DASH, "fp16_set": _fp16_text(e.fp16_set)}
                    for e in s.confirmation or []]
    pareto = [{"count": num(p.fp16_count), "metric": _metric(p), **badge(p.status),
               "index": num(p.index), "fp16_set": _fp16_text(p.fp16_set)} for p in s.pareto]
    found_list = [str(n) for n in s.fp16_nodes]
    proxy_cols: list[str] = []
    for v in s.proxy.values():
        for k, x in v.numbers().items():
            if is_number(x) and k not in proxy_cols:
                proxy_cols.append(k)
    measured = s.measured or {}
    if measured:
        proxy_cols.append("measured damage")
    ranking = []
    for r, node in enumerate(s.ranking, 1):
        scores = [s.proxy[node].numbers()[k] if node in s.proxy else None
                  for k in proxy_cols if k != "measured damage"]
        if measured:
            scores.append(measured[node] if node in measured else None)
        ranking.append({"rank": r, "node": str(node),
                        "cells": [sig(x, 4) if is_number(x) else DASH for x in scores],
                        "found": str(node) in found_list})
    mixed_signed = "mixed" in (signed_off or ())
    head = badge(s.status)
    if on_dev and s.status and not mixed_signed:
        head["status"] += "; not signed off"
    return {"summary": summary, **head,
            "found": found_list, "pruned": [str(n) for n in s.pruned],
            "evaluations": evals, "confirmation": confirmation, "pareto": pareto,
            "ranking": ranking, "proxy_cols": proxy_cols,
            "metric_label": metric_label}


def format_fill(record: RunRecord) -> dict[str, object] | None:
    """The search's format fill (``record.search.format_fill``): whether it ran and why, the
    kept layers moved to FP8, the FP8 calibrator, the cost model's estimates, the dev status
    with them; None when the run had no FP8 candidate (or no search)."""
    s = record.search_run
    fill = s.format_fill if s is not None else None
    if fill is None:
        return None
    estimates = [{"layer": n, "fp16_ms": sig(e.fp16_ms, 4), "fp8_ms": sig(e.fp8_ms, 4),
                  "basis": text(e.basis), "label": text(e.label)}
                 for n, e in (fill.estimates or {}).items()]
    out: dict[str, object] = {"ran": isinstance(fill, FormatFill), "why": text(fill.why),
                              "estimates": estimates}
    if isinstance(fill, FormatFillSkipped):
        return out
    signed_off = signed_candidates(record)
    on_dev = signed_off is not None
    return {**out, "fp8_layers": [str(n) for n in fill.fp8_layers],
            "calibrator": text(fill.calibrator),
            "status": f"{text(fill.status)} on dev" if on_dev else text(fill.status),
            "cls": DEV_CLASS if on_dev else status_class(fill.status),
            "n_required": num(fill.n_required)}
