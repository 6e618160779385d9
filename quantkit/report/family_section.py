"""The report's sign-off family section: the dev-declared family, its power plan, this run's
test ledger, the persistent ledger's look (number, alpha, earlier looks) and the decision."""

from __future__ import annotations

from typing import Any

from quantkit.record.record_view import RecordView
from quantkit.record.signoff_view import LookView
from quantkit.report.fmt import NOT_MEASURED, alpha_text, finite, text, value_text

__all__ = ["family"]


def _look(facts: LookView | None) -> dict[str, Any] | None:
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
    return {"summary": text(facts.summary), "path": text(facts.path),
            "id": text(facts.look_id), "rule": text(facts.rule),
            "same_data": text(facts.same_data),
            "alpha": alpha_text(facts.alpha_one_sided),
            "declared": alpha_text(facts.alpha_declared),
            "supersedes": text(facts.supersedes) if facts.supersedes else "",
            "other_data_looks": int(facts.other_data_looks or 0),
            "earlier": earlier, "read": bool(facts.read_from_ledger)}


def family(record: RecordView) -> dict[str, Any] | None:
    """The family section, None for a run that declared no family and has no look."""
    so = record.signoff
    if so is None or (not so.family and so.ledger is None):
        return None
    rows = []
    for r in so.decision:
        t = so.test_of(r.candidate)
        interval = (f"{t.point:+.4f} [{t.low:+.4f}, {t.high:+.4f}]"
                    if all(finite(x) for x in (t.point, t.low, t.high)) else NOT_MEASURED)
        rows.append({"candidate": text(r.candidate), "raw": text(r.raw_status),
                     "status": text(r.status), "interval": interval,
                     "n": text(t.n), "flip_rate": value_text(t.flip_rate),
                     "icc": value_text(t.icc), "reason": text(r.reason)})
    plan = [{"candidate": text(p.candidate), "needed": text(p.n_required),
             "available": text(p.n_available), "adequate": "yes" if p.adequate else "no",
             "planned_power": value_text(p.planned_power),
             "tested": "no" if p.tested is False else "yes", "reason": text(p.reason)}
            for p in so.power_plan]
    alpha = so.alpha_one_sided
    level = f"{100 * (1 - 2 * alpha):.4g}% CI" if finite(alpha) else "CI"
    return {"order": [str(c) for c in so.family],
            "method": text(so.method),
            "alpha": alpha_text(alpha), "basis": text(so.basis_rule),
            "ci": f"test delta [{level}]", "rows": rows, "plan": plan,
            "ledger": [f"{e['candidate']}: {e['n']} test examples" for e in so.ledger_evaluations],
            "evaluated_once": bool(so.evaluated_once),
            "look": _look(so.ledger),
            "not_tested": [f"{k}: {v}" for k, v in so.not_tested.items()],
            "recommendation": text(so.reason),
            "excluded": [f"{k}: {v}" for k, v in so.excluded.items()]}
