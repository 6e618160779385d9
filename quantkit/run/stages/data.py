"""Stage "data": the run's seeded, group-disjoint, hashed splits (train, calib, dev, test)."""

from __future__ import annotations

from quantkit.data import load_splits
from quantkit.data.splits import Splits
from quantkit.run.context import RunContext
from quantkit.run.detection import detector_of
from quantkit.tasks.detection.dataset import load_detection_splits

__all__ = ["data"]


def data(ctx: RunContext) -> Splits:
    """The run's seeded, hashed splits (quantkit.data.Splits); a detector's images and box
    labels are checked against the model's classes (quantkit/tasks/detection/dataset.py)."""
    if ctx.settings.data.kind == "detection":
        return load_detection_splits(ctx.settings, cache_dir=ctx.cache_dir,
                                     class_names=detector_of(ctx.settings,
                                                             ctx.cache_dir).class_names)
    return load_splits(ctx.settings, cache_dir=ctx.cache_dir)
