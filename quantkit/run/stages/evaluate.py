"""Stage "evaluate": every candidate artifact evaluated on **dev** against the FP32 reference
(task metrics, agreement, the paired test): the numbers every later choice reads. The test
split is read only by the signoff stage."""

from __future__ import annotations

from quantkit.run.artifact import Artifact
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation, evaluate_artifact

__all__ = ["evaluate"]


def evaluate(ctx: RunContext, artifacts: dict[str, Artifact], reference: Evaluation
             ) -> dict[str, Evaluation]:
    """name -> the artifact's Evaluation on ``reference``'s split (dev)."""
    return {name: evaluate_artifact(ctx, art, reference) for name, art in artifacts.items()}
