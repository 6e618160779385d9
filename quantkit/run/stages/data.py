"""Stage "data": the run's seeded, group-disjoint, hashed splits (train, calib, dev, test)."""

from __future__ import annotations

from quantkit.data import load_splits
from quantkit.data.splits import Splits
from quantkit.run.context import RunContext

__all__ = ["data"]


def data(ctx: RunContext) -> Splits:
    """The run's seeded, hashed splits (quantkit.data.Splits)."""
    return load_splits(ctx.settings, cache_dir=ctx.cache_dir)
