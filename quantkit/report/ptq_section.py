"""The report's post-training section: the recipe, how auto chose it, each step and the proof
of each rewrite (record.ptq, written by the ptq stage: quantkit/run/stages/ptq.py)."""

from __future__ import annotations

from typing import Any

from quantkit.record.record_view import RecordView

__all__ = ["ptq_context"]


def _num(x: Any, digits: int = 4) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x:.{digits}g}"


def ptq_context(record: RecordView) -> dict[str, Any] | None:
    """Rows the templates show (strings only), or None for a record without the section."""
    ptq = record.ptq
    if ptq is None:
        return None
    rows = [("recipe", str(ptq.recipe)), ("steps on", str(ptq.steps_on)),
            ("graph rewritten", "yes" if ptq.graph_rewritten else "no")]
    steps = [{"name": str(s.name), "changed": len(s.changes),
              "skipped": "; ".join(f"{k}: {v}" for k, v in list(s.skipped.items())[:4])}
             for s in ptq.steps]
    proofs = [{"step": str(p.step), "kept": "kept" if p.kept else "DROPPED",
               "error": _num(p.relative_error, 3), "examples": str(p.examples),
               "reason": str(p.reason)}
              for p in ptq.proofs]
    trials = [{"recipe": str(t.recipe), "steps": str(t.steps_on), "dimension": str(t.dimension),
               "score": _num(t.score), "note": str(t.note or "")} for t in ptq.trials]
    return {"rows": rows, "steps": steps, "proofs": proofs, "trials": trials,
            "chosen": str(ptq.chosen), "score_kind": str(ptq.score_kind),
            "not_tried": [str(x) for x in ptq.not_tried],
            "dropped_compare": ptq.dropped_compare_tensors}
