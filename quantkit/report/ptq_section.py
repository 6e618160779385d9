"""The report's post-training section: the recipe, how auto chose it, each step and the proof
of each rewrite (record.ptq, written by the ptq stage: quantkit/run/stages/ptq.py)."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord

__all__ = ["ptq_context"]


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x:.{digits}g}"


def ptq_context(record: RunRecord) -> dict[str, object] | None:
    """Rows the templates show (strings only), or None for a record without the section."""
    ptq = record.ptq
    per_plan = [{"candidate": name, "name": str(st.name), "changed": len(st.changes),
                 "skipped": "; ".join(f"{k}: {v}" for k, v in list(st.skipped.items())[:4]),
                 "params": ", ".join(f"{k}={v}" for k, v in st.params.items())}
                for name, c in record.candidates.items() for st in c.ptq or []]
    if ptq is None:
        return None
    rows = [("recipe", str(ptq.recipe)), ("steps on", str(ptq.steps_on)),
            ("graph rewritten", "yes" if ptq.graph_rewritten else "no")]
    if ptq.dropped_compare_tensors:  # the rewrites removed tensors the per-layer run compares
        rows.append(("compare tensors the rewrites removed",
                     ", ".join(ptq.dropped_compare_tensors)))
    steps = [{"name": str(s.name), "changed": len(s.changes),
              "skipped": "; ".join(f"{k}: {v}" for k, v in list(s.skipped.items())[:4])}
             for s in ptq.steps]
    proofs = [{"step": str(p.step), "kept": "kept" if p.kept else "DROPPED",
               "error": _num(p.relative_error, 3), "examples": str(p.examples),
               "reason": str(p.reason)}
              for p in ptq.proofs]
    choice = ptq.choice
    trials = [{"recipe": str(t.recipe), "steps": str(t.steps_on), "dimension": str(t.dimension),
               "score": _num(t.score), "note": str(t.note or "")}
              for t in (choice.trials if choice is not None else [])]
    return {"rows": rows, "steps": steps, "proofs": proofs, "trials": trials,
            "chosen": str(choice.chosen) if choice is not None else "",
            "score_kind": str(choice.score) if choice is not None else "",
            "not_tried": [str(x) for x in (choice.dimensions_not_tried if choice else [])],
            "dropped_compare": len(ptq.dropped_compare_tensors), "per_plan": per_plan}
