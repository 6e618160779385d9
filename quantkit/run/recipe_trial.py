"""What ``ptq.recipe=auto`` tried and chose (quantkit/run/recipe_choice.py): typed, recorded
in ``record.ptq.choice`` and carried by the ptq stage's Int8Source."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.ptq.pipeline import Rewritten
from quantkit.record.ptq import PtqChoice, PtqTrial
from quantkit.settings.ptq_recipe import Recipe

__all__ = ["RecipeChoice", "RecipeTrial"]


@dataclass(frozen=True)
class RecipeTrial:
    """One recipe tried: its ``score`` on ``examples`` dev examples (lower is better; None
    when it could not be built), the ``dimension`` being decided, ``seconds`` it took (0
    when read from the stage cache) and what was noted (a rewrite dropped by its proof)."""

    label: str
    recipe: Recipe
    dimension: str
    score: float | None
    examples: int
    seconds: float
    note: str = ""

    def to_record(self) -> PtqTrial:
        return PtqTrial(recipe=self.label, steps_on=self.recipe.describe(),
                        dimension=self.dimension, score=self.score, examples=self.examples,
                        seconds=round(self.seconds, 3), note=self.note)


@dataclass(frozen=True)
class RecipeChoice:
    """What ``ptq.recipe=auto`` chose (``name``, ``recipe``, its proven ``rewritten`` graph)
    and every trial, in order; ``score_kind``: what the scores measure."""

    name: str
    recipe: Recipe
    rewritten: Rewritten
    trials: tuple[RecipeTrial, ...]
    score_kind: str
    budget: int
    skipped: tuple[str, ...] = ()

    def to_record(self) -> PtqChoice:
        return PtqChoice(chosen=self.name, steps_on=self.recipe.describe(),
                         score=self.score_kind, budget_evaluations=self.budget,
                         evaluations=len(self.trials),
                         trials=[t.to_record() for t in self.trials],
                         dimensions_not_tried=list(self.skipped))
