"""The report's verdict section: the verdict cards, the thresholds the verdicts were taken
at (with the declared budget's split), and the per-candidate verdict table."""

from __future__ import annotations

from typing import Any

from quantkit.record.backend_check_view import BackendCheckView
from quantkit.record.candidate_view import CandidateView
from quantkit.record.record_view import RecordView
from quantkit.record.verdict_entry import MarginView, VerdictEntry
from quantkit.report.fmt import (
    DASH,
    NOT_MEASURED,
    cfg,
    finite,
    interval,
    is_number,
    num,
    pct,
    sig,
    text,
)
from quantkit.report.status import engine_lines, verdict_view
from quantkit.verdict.margin import LABELLED_METRICS

__all__ = ["calibrator_rows", "thresholds", "verdict_block"]


def _warnings(c: CandidateView) -> list[str]:
    out = []
    bc = c.backend_check
    if bc is not None and bc.gates_recommendation and bc.ok is False:
        out.append(f"engine check {bc.status}: {bc.what_to_run or ''}")
    elif bc is not None and not bc.is_engine_check and bc.checked and bc.ok is False:
        # a record from before issue 24
        out.append(f"backend check failed: agreement {num(bc.agreement)} on n={num(bc.n)}")
    lint = c.lint_violations
    if is_number(lint) and lint > 0:
        out.append(f"{lint} lint violation(s)")
    return out


def verdict_block(record: RecordView) -> dict[str, Any]:
    """The verdict cards: one per candidate, the recommended one first in the banner."""
    rec = record.recommended
    rows = []
    for name, c in record.candidates.items():
        v = c.verdict
        warnings = _warnings(c)
        if v is None:
            rows.append({"name": name, "status": "REFERENCE" if name == "fp32" else "NO VERDICT",
                         "cls": "other", "headline": c.numerics or "",
                         "reasons": [], "recommended": name == rec, "warnings": warnings,
                         "required_n": None})
            continue
        reasons = [str(r) for r in v.reasons]
        metric = v.decision_metric
        d = v.delta(metric) if metric else None
        what = (f"{metric} delta" if metric in LABELLED_METRICS else
                f"{metric}: share of examples within the tolerance"
                if v.margin.quantile is not None else str(metric))
        headline = f"{what} {interval(d)}" if d is not None else (reasons[0] if reasons else "")
        view = verdict_view(record, name, v.status)
        rows.append({"name": name, "status": view.text, "cls": view.cls, "headline": headline,
                     "reasons": reasons, "recommended": name == rec, "warnings": warnings,
                     "required_n": v.required_n, "dev_only": view.dev_only})
    rec_row = next((r for r in rows if r["recommended"]), None)
    return {"recommended": rec, "recommended_row": rec_row, "verdicts": rows,
            "engine": engine_lines(record, rec),
            "recommendation_reason": text(record.recommendation_reason)}


def _label_free_thresholds(metric: Any, mg: MarginView, level: Any) -> list[tuple[str, str]]:
    """Threshold rows of a label-free verdict (agreement, or a per-example score vs FP32)."""
    lvl = f"the {pct(level, 0)} interval" if finite(level) else "the interval"
    if mg.quantile is not None:
        side = ">=" if mg.higher_is_better else "<="
        rows = [("decision metric", f"{text(metric)} (label-free, vs FP32)"),
                ("per-example tolerance", f"{text(metric)} {side} {cfg(mg.bound)}"),
                ("tested", f"the share of examples within it (the {cfg(mg.quantile)} "
                           "quantile, verdict.score_quantile), exact binomial "
                           "(Clopper-Pearson) bound"),
                ("PASS when", f"{lvl} of the share of examples within the tolerance lies "
                              f"above {cfg(mg.min_share)}")]
        gal = mg.gallery
        if gal is not None:
            rows.append(("recall@k gallery", f"{num(gal.size)} {text(gal.source)} "
                                             f"examples, sha256 {str(gal.sha256)[:12]}"))
        return rows
    for bound, value, where in (("floor", mg.floor, "above"), ("ceiling", mg.ceiling, "below"),
                                ("min_agreement", mg.min_agreement, "above")):
        if value is not None:
            return [("decision metric", f"{text(metric)} (label-free, vs FP32)"),
                    (f"declared {'minimum' if bound == 'min_agreement' else bound}", cfg(value)),
                    ("PASS when", f"{lvl} of the mean lies {where} it")]
    return []


def thresholds(record: RecordView, v: VerdictEntry | None) -> list[tuple[str, str]]:
    """What the verdicts were taken at: metric, margin, alpha, n, the budget, the config."""
    cfg_v, cfg_c = record.config.verdict, record.config.compare
    rows: list[tuple[str, str]] = []
    if v is not None:
        margin = v.margin
        metric = v.decision_metric
        level = next((d.level for d in v.deltas.values() if d.level is not None), None)
        label_free = _label_free_thresholds(metric, margin, level)
        rows += label_free + [("alpha", cfg(v.alpha)),
                              ("paired eval examples (n)", num(v.n))] if label_free else [
            ("decision metric", text(metric)),
            ("margin kind", text(margin.kind)),
            ("margin value", cfg(margin.value)),
            ("margin (absolute)", sig(margin.abs, 4)),
            ("PASS when", f"the {f'{100 * level:g}%' if finite(level) else ''} interval of the "
                          f"{text(metric)} delta lies above -{sig(margin.abs, 4)}"),
            ("alpha", cfg(v.alpha)),
            ("paired eval examples (n)", num(v.n)),
        ]
    else:
        rows.append(("verdict", NOT_MEASURED))
    rows += _budget_rows(record)
    if "n_boot" in cfg_v:
        rows.append(("bootstrap resamples", cfg(cfg_v["n_boot"])))
    for key, label in (("floor_multiple", "layer flagged when INT8 noise > this x FP16 noise"),
                       ("numerics_margin_share", "engine check: its share of the margin"),
                       ("backend_check_subset", "engine check: dev examples (at most)"),
                       ("subset", "per-layer comparison: examples")):
        if key in cfg_c:
            rows.append((label, cfg(cfg_c[key])))
    return rows


def _budget_rows(record: RecordView) -> list[tuple[str, str]]:
    """The declared budget's split between the sign-off and the engine check (the record's
    ``backend_check.budget``), so the margin above reads against what was declared."""
    b = next((c.backend_check.budget for c in record.candidates.values()
              if c.backend_check is not None and c.backend_check.budget is not None), None)
    if not b or not b.share:
        return []
    if b.metric in LABELLED_METRICS and record.config.margin_kind == "relative":
        rel = " (relative: x FP32 accuracy)"
        return [("declared margin (bounds the deployed artifact)", cfg(b.declared) + rel),
                ("the sign-off decides at", cfg(b.signoff) + rel),
                ("engine check tolerance", f"{cfg(b.tolerance)}{rel} as a "
                                           f"{text(b.units)} vs the emulation; "
                                           f"{text(b.composition)}")]
    return [("declared budget (bounds the deployed artifact)", cfg(b.declared)),
            ("the sign-off decides at", cfg(b.signoff)),
            ("engine check tolerance", f"{cfg(b.tolerance)} ({text(b.units)} "
                                       f"vs the emulation; {text(b.composition)})")]


def _backend_text(bc: BackendCheckView | None, *, detail: bool = True) -> str:
    if bc is not None and bc.is_engine_check:  # the engine check
        status = str(bc.status)
        if not bc.checked:
            return {"not_run": "NOT run", "not_needed": "not needed"}.get(status, status) + \
                (f": {bc.what_to_run or bc.reason}" if detail else "")
        gate = bc.gate
        out = f"{status} ({gate.units} {sig(gate.observed, 3)} <= {sig(gate.tolerance, 3)}?)"
        return out + (f", n={num(bc.n)}" + (f"; {bc.what_to_run}" if bc.what_to_run else "")
                      if detail else "")
    if bc is None or not bc.checked:
        return "not checked"
    if not detail:
        return ("ok" if bc.ok else "MISMATCH") + f" ({num(bc.agreement)})"
    out = ("ok" if bc.ok else "MISMATCH") + f": agreement {num(bc.agreement)}, n={num(bc.n)}"
    if bc.accuracy:
        out += " (accuracy " + ", ".join(f"{k} {num(v)}" for k, v in bc.accuracy.items()) + ")"
    return out


def calibrator_rows(record: RecordView) -> list[dict[str, Any]]:
    """The verdict table: metrics, delta, McNemar, status and engine check per candidate."""
    rows = []
    for name, c in record.candidates.items():
        v = c.verdict if c.verdict is not None else VerdictEntry()
        metric = v.decision_metric if c.verdict is not None else None
        mc = v.mcnemar
        status = v.status
        view = verdict_view(record, name, status)
        rows.append({
            "name": name,
            "recommended": name == record.recommended,
            "accuracy": num(c.metric("accuracy")),
            "macro_f1": num(c.metric("macro_f1")),
            "agreement": num(c.agreement_fp32),
            "kl": sig(c.mean_kl_fp32) if c.mean_kl_fp32 is not None else DASH,
            "metric": metric or DASH,
            "delta": interval(v.delta(metric), level=False) if metric else
            ("reference" if name == "fp32" else NOT_MEASURED),
            "b": num(mc.b), "c": num(mc.c),
            "p": sig(mc.p) if mc.p is not None else DASH,
            "status": view.text if status else ("reference" if name == "fp32" else DASH),
            "cls": view.cls,
            "required_n": num(v.required_n) if status == "INCONCLUSIVE" else DASH,
            "backend": _backend_text(c.backend_check) if name != "fp32" else DASH,
            "backend_short": _backend_text(c.backend_check, detail=False)
            if name != "fp32" else DASH,
        })
    return rows
