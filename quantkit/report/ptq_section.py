"""The report's post-training section: the recipe, how auto chose it, each step and the proof
of each rewrite (record.ptq, written by the ptq stage: quantkit/run/ptq_stage.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ptq_context"]


def _num(x: Any, digits: int = 4) -> str:
    return "n/a" if not isinstance(x, (int, float)) else f"{x:.{digits}g}"


def ptq_context(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """Rows the templates show (strings only), or None for a record without the section."""
    ptq = record.get("ptq") or {}
    if not isinstance(ptq, Mapping) or not ptq:
        return None
    rows = [("recipe", str(ptq.get("recipe", ""))), ("steps on", str(ptq.get("steps_on", ""))),
            ("graph rewritten", "yes" if ptq.get("graph_rewritten") else "no")]
    steps = [{"name": str(s.get("name")), "changed": len(s.get("changes") or {}),
              "skipped": "; ".join(f"{k}: {v}" for k, v in list((s.get("skipped") or {})
                                                                 .items())[:4])}
             for s in ptq.get("steps") or [] if isinstance(s, Mapping)]
    proofs = [{"step": str(p.get("step")), "kept": "kept" if p.get("kept") else "DROPPED",
               "error": _num(p.get("relative_error"), 3), "examples": str(p.get("examples")),
               "reason": str(p.get("reason", ""))}
              for p in ptq.get("proofs") or [] if isinstance(p, Mapping)]
    choice = ptq.get("choice") or {}
    trials = []
    if isinstance(choice, Mapping):
        for t in choice.get("trials") or []:
            if isinstance(t, Mapping):
                trials.append({"recipe": str(t.get("recipe")), "steps": str(t.get("steps_on")),
                               "dimension": str(t.get("dimension")),
                               "score": _num(t.get("score")), "note": str(t.get("note") or "")})
    return {"rows": rows, "steps": steps, "proofs": proofs, "trials": trials,
            "chosen": str(choice.get("chosen", "")) if isinstance(choice, Mapping) else "",
            "score_kind": str(choice.get("score", "")) if isinstance(choice, Mapping) else "",
            "not_tried": [str(x) for x in (choice.get("dimensions_not_tried") or [])]
            if isinstance(choice, Mapping) else [],
            "dropped_compare": len(ptq.get("dropped_compare_tensors") or {})}
