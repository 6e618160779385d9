"""Which candidates' per-layer numbers the report shows: the FP16 floor, the INT8 candidates
with layers, the focus candidate, its worst calibrated tensors."""

from __future__ import annotations

from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import finite

__all__ = ["floor_candidate", "floor_sqnr", "focus_candidate", "layer_candidates",
           "worst_tensors"]


def floor_candidate(record: RunRecord) -> str | None:
    """The candidate whose per-layer numbers are the FP16 floor ("fp16"), if it has layers."""
    c = record.candidate("fp16")
    return "fp16" if c is not None and c.layers else None


def layer_candidates(record: RunRecord) -> list[str]:
    """Candidates with per-layer numbers, excluding the FP16 floor, in record order."""
    floor = floor_candidate(record)
    return [n for n, c in record.candidates.items() if c.layers and n != floor]


def floor_sqnr(record: RunRecord, candidate: str, tensor: str) -> float | None:
    """FP16 SQNR of ``tensor``: the fp16 candidate's layers, else the flagged-layer entry."""
    floor = floor_candidate(record)
    if floor:
        value = record.candidates[floor].layer_sqnr(tensor)
        if value is not None:
            return value
    c = record.candidate(candidate)
    for f in c.flagged_layers if c is not None else []:
        if f.name == tensor:
            return f.fp16_sqnr_db
    return None


def focus_candidate(record: RunRecord) -> str | None:
    """The recommended candidate if it has per-layer numbers, else the first that has."""
    names = layer_candidates(record)
    if record.recommended in names:
        return record.recommended
    return names[0] if names else None


def worst_tensors(record: RunRecord, top_n: int = 6) -> tuple[list[str], str]:
    """Calibrated tensors with the lowest SQNR in the focus candidate, and how they were chosen.

    Falls back to the first ``top_n`` calibrated tensors (record order) when no candidate has
    per-layer numbers for them.
    """
    tensors = list(record.calibration.summary) if record.calibration is not None else []
    focus = focus_candidate(record)
    if focus:
        c = record.candidates[focus]
        scored = [t for t in tensors if finite(c.layer_sqnr(t))]
        if scored:
            scored.sort(key=c.layer_sqnr)
            return scored[:top_n], f"lowest SQNR in {focus}"
    return tensors[:top_n], "first calibrated tensors in graph order"
