"""The report's per-layer section: for each INT8 candidate with per-layer numbers, its worst
tensors by SQNR against the FP16 floor and the full table."""

from __future__ import annotations

from quantkit.record.candidate import FlaggedLayer, LayerStats
from quantkit.record.run_record import RunRecord
from quantkit.report.fmt import DASH, finite, num, pct, sig
from quantkit.report.layer_selection import floor_candidate, floor_sqnr, layer_candidates

__all__ = ["TOP_N_LAYERS", "layer_sections"]

#: Rows of the "worst layers" table shown before the collapsible full table.
TOP_N_LAYERS = 10


def _layer_row(record: RunRecord, cand_name: str, idx: int, tensor: str, stats: LayerStats,
               flagged: dict[str, FlaggedLayer]) -> dict[str, object]:
    f = flagged.get(tensor)
    clip = stats.clipping_rate
    return {"idx": idx, "name": tensor,
            "sqnr": num(stats.sqnr_db, 2),
            "floor": num(floor_sqnr(record, cand_name, tensor), 2),
            "cosine": num(stats.cosine, 6),
            "clip": pct(clip, 4) if clip is not None else "not quantized",
            "rel": sig(stats.relative_error),
            "ratio": sig(f.ratio) if f is not None and f.ratio is not None else DASH,
            "flagged": f is not None}


def layer_sections(record: RunRecord) -> list[dict[str, object]]:
    """One section per INT8 candidate with per-layer numbers."""
    sections = []
    for name in layer_candidates(record):
        c = record.candidates[name]
        layers = c.layers or {}
        flagged = {f.name: f for f in c.flagged_layers if f.name and f.flagged}
        rows = [_layer_row(record, name, i, t, s, flagged)
                for i, (t, s) in enumerate(layers.items())]
        sqnr = [s.sqnr_db for s in layers.values()]
        # worst first; tensors without an SQNR last; ties in graph order
        by_sqnr = sorted(range(len(rows)),
                         key=lambda i: (0, sqnr[i], i) if finite(sqnr[i]) else (1, 0.0, i))
        first = c.first_diverging
        sections.append({
            "name": name,
            "n": len(rows),
            "n_flagged": len(flagged),
            "first_diverging": first,
            "first_index": list(layers).index(first) if first in layers else None,
            "worst": [rows[i] for i in by_sqnr[:TOP_N_LAYERS]],
            "all": rows,
            "has_floor": floor_candidate(record) is not None or bool(flagged),
        })
    return sections
