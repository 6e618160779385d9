"""The report's verdict section: the verdict cards, the thresholds the verdicts were taken
at (with the declared budget's split), and the per-candidate verdict table."""

from __future__ import annotations

from quantkit.record.candidate import BackendCheckRecord, CandidateRecord
from quantkit.record.run_record import RunRecord
from quantkit.record.verdict import Margin, VerdictRecord
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
from quantkit.verdict.margin import DELTA_METRICS

__all__ = ["calibrator_rows", "thresholds", "verdict_block"]


def _warnings(c: CandidateRecord) -> list[str]:
    out = []
    bc = c.backend_check
    if bc is not None and bc.gates_recommendation and bc.ok is False:
        out.append(f"engine check {bc.status}: {bc.what_to_run or ''}")
    elif bc is not None and not bc.is_engine_check and bc.checked and bc.ok is False:
        # a record from before issue 24
        out.append(f"backend check failed: agreement {num(bc.agreement)} on n={num(bc.n)}")
    lint = c.lint.violations if c.lint is not None else None
    if is_number(lint) and lint > 0:
        out.append(f"{lint} lint violation(s)")
    return out


def verdict_block(record: RunRecord) -> dict[str, object]:
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
        what = (f"{metric} delta" if metric in DELTA_METRICS else
                f"{metric}: share of examples within the tolerance"
                if v.margin.share is not None else str(metric))
        headline = f"{what} {interval(d)}" if d is not None else (reasons[0] if reasons else "")
        view = verdict_view(record, name, v.status)
        rows.append({"name": name, "status": view.text, "cls": view.cls, "headline": headline,
                     "reasons": reasons, "recommended": name == rec, "warnings": warnings,
                     "required_n": v.required_n, "dev_only": view.dev_only})
    rec_row = next((r for r in rows if r["recommended"]), None)
    return {"recommended": rec, "recommended_row": rec_row, "verdicts": rows,
            "engine": engine_lines(record, rec),
            "recommendation_reason": text(record.recommendation.reason
                                          if record.recommendation is not None else None)}


def _label_free_thresholds(metric: str | None, mg: Margin,
                           level: float | None) -> list[tuple[str, str]]:
    """Threshold rows of a label-free verdict (agreement, or a per-example score vs FP32)."""
    lvl = f"the {pct(level, 0)} interval" if finite(level) else "the interval"
    share = mg.share
    if share is not None:
        side = ">=" if share.higher_is_better else "<="
        rows = [("decision metric", f"{text(metric)} (label-free, vs FP32)"),
                ("per-example tolerance", f"{text(metric)} {side} {cfg(share.bound)}"),
                ("tested", f"the share of examples within it (the {cfg(share.quantile)} "
                           "quantile: verdict.score_quantile less the engine check's part, "
                           "where one is in the bound), exact binomial (Clopper-Pearson) "
                           "bound"),
                ("PASS when", f"{lvl} of the share of examples within the tolerance lies "
                              f"above {cfg(share.min_share)}")]
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


def thresholds(record: RunRecord, v: VerdictRecord | None) -> list[tuple[str, str]]:
    """What the verdicts were taken at: metric, margin, alpha, n, the budget, the config."""
    rows: list[tuple[str, str]] = []
    if v is not None:
        margin = v.margin
        value = margin.labelled
        metric = v.decision_metric
        level = next((d.level for d in v.deltas.values() if d.level is not None), None)
        label_free = _label_free_thresholds(metric, margin, level)
        rows += label_free + [("alpha", cfg(v.alpha)),
                              ("paired eval examples (n)", num(v.n))] if label_free else [
            ("decision metric", text(metric)),
            ("margin kind", text(margin.kind)),
            ("margin value", cfg(value.value if value is not None else None)),
            ("margin (absolute)", sig(value.abs if value is not None else None, 4)),
            ("PASS when", f"the {f'{100 * level:g}%' if finite(level) else ''} interval of the "
                          f"{text(metric)} delta lies above "
                          f"-{sig(value.abs if value is not None else None, 4)}"),
            ("alpha", cfg(v.alpha)),
            ("paired eval examples (n)", num(v.n)),
        ]
    else:
        rows.append(("verdict", NOT_MEASURED))
    rows += _budget_rows(record)
    if record.configured("verdict", "n_boot") is not None:
        rows.append(("bootstrap resamples", cfg(record.configured("verdict", "n_boot"))))
    for key, label in (("floor_multiple", "layer flagged when INT8 noise > this x FP16 noise"),
                       ("numerics_margin_share", "engine check: its share of the margin"),
                       ("backend_check_subset", "engine check: dev examples (at most)"),
                       ("subset", "per-layer comparison: examples")):
        if record.configured("compare", key) is not None:
            rows.append((label, cfg(record.configured("compare", key))))
    return rows


def _budget_rows(record: RunRecord) -> list[tuple[str, str]]:
    """The declared budget's split between the sign-off and the engine check (the record's
    ``backend_check.budget``), so the margin above reads against what was declared, and
    what the engine check compares (where the deployed artifact runs)."""
    basis = next((c.backend_check.basis for c in record.candidates.values()
                  if c.backend_check is not None and c.backend_check.basis is not None), None)
    if basis is None:
        return []
    b = basis.budget
    where = [("deployed artifact", text(basis.deployment)),
             ("engine check compares", text(basis.plan.compared))]
    if not b.share:
        return where
    if b.metric in DELTA_METRICS and record.configured("verdict", "margin_kind") == "relative":
        rel = f" (relative: x FP32 {'accuracy' if b.metric == 'accuracy' else b.metric})"
        return [("declared margin (bounds the deployed artifact)", cfg(b.declared) + rel),
                ("the sign-off decides at", cfg(b.signoff) + rel),
                ("engine check tolerance", f"{cfg(b.tolerance)}{rel} as a "
                                           f"{text(b.units)} vs the emulation; "
                                           f"{text(b.composition)}"), *where]
    return [("declared budget (bounds the deployed artifact)", cfg(b.declared)),
            ("the sign-off decides at", cfg(b.signoff)),
            ("engine check tolerance", f"{cfg(b.tolerance)} ({text(b.units)} "
                                       f"vs the emulation; {text(b.composition)})"), *where]


def _backend_text(bc: BackendCheckRecord | None, *, detail: bool = True) -> str:
    if bc is not None and bc.is_engine_check:  # the engine check
        status = str(bc.status)
        if not bc.checked:
            return {"not_run": "NOT run", "not_needed": "not needed"}.get(status, status) + \
                (f": {bc.what_to_run or bc.reason}" if detail else "")
        gate = bc.gate
        out = (f"{status} ({gate.units if gate else ''} {sig(gate.observed if gate else None, 3)}"
               f" <= {sig(gate.tolerance if gate else None, 3)}?)")
        power = (f", a faithful engine's power {bc.faithful_power:.2f} (0.8 needs "
                 f"{num(bc.planned_n)})" if bc.faithful_power is not None else "")
        return out + (f", n={num(bc.n)}{power}" + (f"; {bc.what_to_run}" if bc.what_to_run
                                                    else "") if detail else "")
    if bc is None or not bc.checked:
        return "not checked"
    if not detail:
        return ("ok" if bc.ok else "MISMATCH") + f" ({num(bc.agreement)})"
    out = ("ok" if bc.ok else "MISMATCH") + f": agreement {num(bc.agreement)}, n={num(bc.n)}"
    if bc.accuracy:
        out += " (accuracy " + ", ".join(f"{k} {num(v)}" for k, v in bc.accuracy.items()) + ")"
    return out


def calibrator_rows(record: RunRecord) -> list[dict[str, object]]:
    """The verdict table: metrics, delta, McNemar, status and engine check per candidate."""
    rows = []
    for name, c in record.candidates.items():
        v = c.verdict
        metric = v.decision_metric if v is not None else None
        mc = v.mcnemar if v is not None else None
        status = v.status if v is not None else None
        view = verdict_view(record, name, status)
        rows.append({
            "name": name,
            "recommended": name == record.recommended,
            "accuracy": num(c.metrics.accuracy),
            "macro_f1": num(c.metrics.macro_f1),
            "agreement": num(c.agreement_fp32),
            "kl": sig(c.mean_kl_fp32) if c.mean_kl_fp32 is not None else DASH,
            "metric": metric or DASH,
            "delta": interval(v.delta(metric), level=False) if v is not None and metric else
            ("reference" if name == "fp32" else NOT_MEASURED),
            "b": num(mc.b if mc else None), "c": num(mc.c if mc else None),
            "p": sig(mc.p) if mc is not None and mc.p is not None else DASH,
            "status": view.text if status else ("reference" if name == "fp32" else DASH),
            "cls": view.cls,
            "required_n": num(v.required_n) if v is not None and status == "INCONCLUSIVE"
            else DASH,
            "backend": _backend_text(c.backend_check) if name != "fp32" else DASH,
            "backend_short": _backend_text(c.backend_check, detail=False)
            if name != "fp32" else DASH,
        })
    return rows
