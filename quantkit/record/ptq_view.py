"""The post-training section of the record (``record.ptq``, schema 3): the recipe, its steps,
the proof of each rewrite, and auto's choice with its trials."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, seq, view_field, view_to_dict

__all__ = ["PtqProof", "PtqStep", "PtqTrial", "PtqView"]


@dataclass(frozen=True)
class PtqStep:
    """One ptq step: the nodes it changed and those it skipped, with why."""

    name: Any = None
    changes: Any = field(default_factory=dict)  # node -> change (any sized collection)
    skipped: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> PtqStep:
        d = mapping(d)
        return cls(name=d.get("name"), changes=d.get("changes") or {},
                   skipped=dict(d.get("skipped") or {}))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class PtqProof(FlatView):
    """The proof of one rewrite: FP32 output unchanged on calibration data, else dropped."""

    step: Any = None
    kept: Any = None
    relative_error: Any = None
    examples: Any = None
    reason: Any = ""


@dataclass(frozen=True)
class PtqTrial(FlatView):
    """One recipe auto tried on dev, and its score."""

    recipe: Any = None
    steps_on: Any = None
    dimension: Any = None
    score: Any = None
    note: Any = None


@dataclass(frozen=True)
class PtqView:
    """``record.ptq``: the recipe, its steps and proofs, auto's choice."""

    recipe: Any = ""
    steps_on: Any = ""
    graph_rewritten: Any = None
    steps: list[PtqStep] = field(default_factory=list)
    proofs: list[PtqProof] = field(default_factory=list)
    trials: list[PtqTrial] = view_field("choice", "trials", factory=list)
    chosen: Any = view_field("choice", "chosen", default="")
    score_kind: Any = view_field("choice", "score", default="")
    not_tried: list[Any] = view_field("choice", "dimensions_not_tried", factory=list)
    dropped_compare_tensors: int = 0

    @classmethod
    def from_dict(cls, d: Any) -> PtqView:
        d = mapping(d)
        choice = mapping(d.get("choice"))
        return cls(recipe=d.get("recipe", ""), steps_on=d.get("steps_on", ""),
                   graph_rewritten=d.get("graph_rewritten"),
                   steps=[PtqStep.from_dict(s) for s in seq(d.get("steps"))
                          if isinstance(s, Mapping)],
                   proofs=[PtqProof.from_dict(p) for p in seq(d.get("proofs"))
                           if isinstance(p, Mapping)],
                   trials=[PtqTrial.from_dict(t) for t in seq(choice.get("trials"))
                           if isinstance(t, Mapping)],
                   chosen=choice.get("chosen", ""), score_kind=choice.get("score", ""),
                   not_tried=seq(choice.get("dimensions_not_tried")),
                   dropped_compare_tensors=len(d.get("dropped_compare_tensors") or {}))

    @classmethod
    def parse(cls, d: Any) -> PtqView | None:
        """The section of a non-empty recorded mapping, else None (a record before schema 3)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        d["dropped_compare_tensors"] = {str(i): None for i in range(self.dropped_compare_tensors)}
        return d
