"""The report's sign-off family section: the dev-declared family, its power plan, this run's
test ledger, the persistent ledger's look (number, alpha, earlier looks) and the decision."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord
from quantkit.record.signoff import FamilyRecord, LookFacts
from quantkit.report.fmt import NOT_MEASURED, alpha_text, finite, sig, text, value_text

__all__ = ["family"]


def _look(facts: LookFacts | None) -> dict[str, object] | None:
    """The persistent test ledger's facts of this look (record.signoff.ledger), as text."""
    if facts is None:
        return None
    earlier = []
    for e in facts.earlier_looks:
        st = ", ".join(f"{c} {s}" for c, s in e.statuses.items()) or (e.state or "")
        earlier.append(f"look {text(e.look)} ({str(e.id)[:12]}, "
                       f"{text(e.started)}): one-sided alpha "
                       f"{alpha_text(e.alpha_one_sided)}, {text(e.metric)}, "
                       f"{st}; {text(e.shared_examples)} examples shared")
    this = facts.this_look
    supersedes = this.supersedes if this is not None else None
    return {"summary": text(facts.summary), "path": text(facts.path),
            "model_key": f"{str(facts.model_key)[:12]} ({text(facts.model_key_basis)})",
            "budget": alpha_text(facts.budget), "spent_before": alpha_text(facts.spent_before),
            "started": text(this.started) if this is not None else "",
            "lineage": str(this.lineage)[:12] if this is not None else "",
            "examples": (f"{this.n_examples} (set sha256 {str(this.example_set)[:12]})"
                         if this is not None else ""),
            "id": text(facts.look_id), "rule": text(facts.rule),
            "same_data": text(facts.same_data),
            "alpha": alpha_text(facts.alpha_one_sided),
            "declared": alpha_text(facts.alpha_declared),
            "supersedes": text(supersedes) if supersedes else "",
            "other_data_looks": int(facts.other_data_looks or 0),
            "earlier": earlier, "read": bool(facts.read_from_ledger),
            "knows": text(facts.ledger_knows) if facts.ledger_knows else "",
            "first": bool(facts.first_in_ledger),
            "location": text(facts.location) if facts.location else "",
            "new_study": (text(facts.new_study) + ("" if facts.joined_by in ("new_study", None)
                                                   else " (not applied: these test examples "
                                                        "overlap earlier looks, so the look "
                                                        "is charged with them)"))
            if facts.new_study else "",
            "check": _check(facts)}


def _check(facts: LookFacts) -> str:
    """The execution check this run was, in one sentence ("" when it was none)."""
    c = facts.execution_check
    if c is None:
        return ""
    per = ", ".join(f"{n}: {c.first_statuses.get(n, '?')} there, {s} here -> "
                    f"{c.combined.get(n, '?')}" for n, s in c.statuses.items())
    return (f"this run is an execution check of look {str(c.of_look)[:12]} (first decided on "
            f"{text(c.first_execution)}; check {str(c.check_id)[:12]}, after "
            f"{c.earlier_checks} earlier check(s)): {per}. Rule: {text(c.rule)}")


def family(record: RunRecord) -> dict[str, object] | None:
    """The family section, None for a run that declared no family and has no look."""
    so = record.signed
    if so is None or (not so.family.candidates and so.ledger is None):
        return None
    rows = []
    for r in so.decision.rows if so.decision is not None else []:
        t = so.test_of(r.candidate)
        point, low, high = (t.point, t.low, t.high) if t is not None else (None, None, None)
        interval = (f"{point:+.4f} [{low:+.4f}, {high:+.4f}]"
                    if all(finite(x) for x in (point, low, high)) else NOT_MEASURED)
        groups = t.groups if t is not None else None
        rows.append({"candidate": text(r.candidate), "raw": text(r.raw_status),
                     "status": text(r.status), "interval": interval,
                     "n": text(t.n if t is not None else None),
                     "flip_rate": value_text(t.flip_rate if t is not None else None),
                     "icc": value_text(groups.icc if groups is not None else None),
                     "p_adjusted": sig(r.p_noninferiority_adjusted), "reason": text(r.reason)})
    plan = [{"candidate": text(p.candidate), "needed": text(p.n_required),
             "available": text(p.n_available), "adequate": "yes" if p.adequate else "no",
             "planned_power": value_text(p.planned_power),
             "tested": "no" if p.tested is False else "yes", "reason": text(p.reason)}
            for p in so.power_plan.rows]
    alpha = so.alpha_one_sided
    level = f"{100 * (1 - 2 * alpha):.4g}% CI" if finite(alpha) else "CI"
    fam, ledger, rec = so.family, so.test_ledger, so.recommendation
    return {"order": [str(c) for c in fam.candidates],
            "method": text(so.method),
            "alpha": alpha_text(alpha),
            "basis": text(fam.order_rule if isinstance(fam, FamilyRecord) else None),
            "sha256": fam.sha256 if isinstance(fam, FamilyRecord) else "",
            "dev_basis": [{"candidate": n, "status": text(b.dev_status),
                           "interval": (f"{b.dev_point:+.4f} [{b.dev_low:+.4f}, {b.dev_high:+.4f}]"
                                        if all(finite(x) for x in (b.dev_point, b.dev_low,
                                                                   b.dev_high)) else NOT_MEASURED),
                           "n": text(b.dev_n), "flip_rate": value_text(b.dev_flip_rate),
                           "p": sig(b.dev_p_noninferiority)}
                          for n, b in (fam.basis.items() if isinstance(fam, FamilyRecord) else [])],
            "plan_reason": text(so.power_plan.reason),
            "ci": f"test delta [{level}]", "rows": rows, "plan": plan,
            "ledger": [f"{e.candidate}: {e.n} test examples"
                       for e in (ledger.evaluations if ledger is not None else [])],
            "evaluated_once": bool(ledger.evaluated_once) if ledger is not None else False,
            "look": _look(so.ledger),
            "not_tested": [f"{k}: {v}" for k, v in (so.not_tested or {}).items()],
            "recommendation": text(rec.reason), "recommendation_basis": text(rec.basis),
            "excluded": [f"{k}: {v}" for k, v in (rec.excluded or {}).items()]}
