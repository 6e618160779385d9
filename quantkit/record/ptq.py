"""The post-training section of the record (``record.ptq``, schema 3): the recipe, its
settings and steps, the proof of every rewrite, and ``ptq.recipe=auto``'s choice with its
trials (run/quant_source.py, run/recipe_trial.py)."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.ptq.proof import StepProof
from quantkit.ptq.step_record import StepRecord
from quantkit.record.serde import JsonObject, JsonValue, optional, to_dict_codec

__all__ = ["PtqChoice", "PtqRecord", "PtqTrial"]


# a rewrite's proof (ptq/proof.py); its ``relative_error`` is written for the reader, derived
to_dict_codec(StepProof, derived={"relative_error": float | None})


@dataclass
class PtqTrial:
    """One recipe ``auto`` tried on dev: its score (lower is better), what it decided."""

    recipe: str
    steps_on: str
    dimension: str
    score: float | None
    examples: int
    seconds: float
    note: str


@dataclass
class PtqChoice:
    """What ``ptq.recipe=auto`` chose and every trial, in order."""

    chosen: str
    steps_on: str
    score: str
    budget_evaluations: int
    evaluations: int
    trials: list[PtqTrial]
    dimensions_not_tried: list[str]


@dataclass
class PtqRecord:
    """``record.ptq``: the recipe, its settings, the graph quantized, its steps and proofs,
    the compare tensors the rewrites dropped, auto's choice."""

    recipe: str
    steps_on: str
    settings: JsonObject
    graph_rewritten: bool
    graph_sha256: str
    steps: list[StepRecord]
    proofs: list[StepProof]
    dropped_compare_tensors: dict[str, JsonValue]
    choice: PtqChoice | None = optional()
