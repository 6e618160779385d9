"""The mixed search's two halves of dev: one to choose the FP16 set on, one to confirm it.

The search (quantkit/precision/fp16_search.py) evaluates up to ``2 ceil(log2 L) + 2`` FP16
sets on dev and keeps the smallest one whose dev evidence gives the planned power on test.
Read on the dev data it was chosen on, that evidence is optimistic (the winner's curse):
among sets near the boundary, the one that looks powered is often the one that drew a
lucky sample, the pruning step most of all (measured on MobileNetV2:
benchmarks/results/mobilenet_int8.md, "Figures behind the rules in quantkit/run/").

So the search chooses on one seeded, group-disjoint half of dev (``selection``) and the set
it returns is read again on the other (``confirmation``), whose estimate of that set is
unbiased: the power plan for test then rests on an estimate the choice never saw. The
full-INT8 baseline (k=0, no choice among sets) is read on all of dev as before. Where dev
is too small for two halves of ``verdict.min_n`` examples (``verdict.min_groups`` groups on
grouped data), the search reads all of dev and the record says so.

The test sign-off is unaffected: its error control never depended on dev; what the halves
buy is the power the search plans for (a test PASS where it promises one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from quantkit.data.partition import Part, partition_groups
from quantkit.record.search import DevHalvesRecord
from quantkit.run.context import RunContext
from quantkit.run.verdicts import split_groups

__all__ = ["DevHalves", "dev_halves"]

#: the seed stream of the halves (the splits use their own streams of ``seed``)
_STREAM = 11


@dataclass(frozen=True)
class DevHalves:
    """Row indices of dev: ``selection`` (the search's choices), ``confirmation`` (the
    chosen set read again); both None when dev is too small (``reason`` says why)."""

    selection: np.ndarray | None
    confirmation: np.ndarray | None
    reason: str

    @property
    def split(self) -> bool:
        return self.selection is not None

    def to_record(self) -> DevHalvesRecord:
        return DevHalvesRecord(
            split=self.split, reason=self.reason,
            selection_n=None if self.selection is None else int(len(self.selection)),
            confirmation_n=None if self.confirmation is None else int(len(self.confirmation)))


def dev_halves(ctx: RunContext) -> DevHalves:
    """Seeded (``seed``), group-disjoint halves of the dev split (module doc)."""
    dev, v = ctx.splits.dev, ctx.settings.verdict
    n = len(dev)
    groups = split_groups(ctx, "dev")
    codes = np.arange(n, dtype=np.int64) if groups is None else np.asarray(groups, np.int64)
    n_groups = int(len(np.unique(codes)))
    if n < 2 * v.min_n or (groups is not None and n_groups < 2 * v.min_groups):
        need = (f"{2 * v.min_n} examples" if groups is None
                else f"{2 * v.min_n} examples in {2 * v.min_groups} groups")
        return DevHalves(None, None, f"dev has {n} examples"
                         + ("" if groups is None else f" in {n_groups} groups")
                         + f": two halves need {need} (verdict.min_n / min_groups); the "
                         "search chose and read its sets on all of dev")
    idx, _ = partition_groups(codes, [Part("selection", n // 2), Part("confirmation", None)],
                              np.random.default_rng([int(ctx.settings.seed), _STREAM]))
    sel, conf = idx["selection"], idx["confirmation"]
    return DevHalves(sel, conf, f"sets chosen on {len(sel)} dev examples, the chosen set "
                                f"confirmed on the other {len(conf)} (seeded, group-disjoint)")
