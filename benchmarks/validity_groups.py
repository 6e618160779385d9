"""The ``few_bad_groups`` row of ``benchmarks/verdict_validity.py``: the whole loss in a few
groups, through the run's own sign-off path (``verdict_validity.experiment``).

World: dev and test each 80 groups (test 75 examples a group = 6,000; dev 31 a group =
2,480); each group of a split carries the loss with probability ``BAD_GROUPS / 80`` (4 of
80 groups of the population: 5%), independently, so a split holds 4 of them on average and
sometimes none (the split is a sample of groups). A bad group's loss is ``80 / 4 = 20``
times the bound, so the population's mean loss is exactly ``loss_factor`` times the bound
the run tests; flips and FP32 accuracy as in the ``grouped`` row. Every candidate shares
the split's bad groups (one cause breaks them all).

Why not exactly 4 bad groups in every split: then the split's mean is the population's
minus only within-group noise and the cluster interval (which also counts the spread
between groups) is conservative; the false PASS comes from splits that draw fewer bad
groups than the population holds (``benchmarks/group_validity.py --few``; measured, with
this row: benchmarks/results/group_validity.md).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["BAD_GROUPS", "N_GROUPS", "few_bad_groups", "draw_few_bad"]

#: groups per split and loss-carrying groups of the population per that many
N_GROUPS, BAD_GROUPS = 80, 4
TEST_GROUP, DEV_GROUP = 75, 31


def _harness(where=None):
    """benchmarks/verdict_validity.py as the Bench came from (``__main__`` when run as a
    script), without a second copy of the module (and without an import loop)."""
    if where is not None:
        return sys.modules[type(where).__module__]
    return sys.modules.get("verdict_validity") or sys.modules["__main__"]


def draw_few_bad(rng, group_size: int, loss: float, vv=None):
    """One split of ``N_GROUPS`` groups of ``group_size`` with the whole ``loss`` (absolute
    accuracy, population mean) in the groups that carry it; (draw, bad groups drawn).
    ``vv``: verdict_validity's module (default: the one loaded)."""
    vv = vv or _harness()
    FLIP, NAMES, P_REF, Draw, onehot = vv.FLIP, vv.NAMES, vv.P_REF, vv.Draw, vv.onehot
    n = N_GROUPS * group_size
    g = np.arange(n) // group_size
    share = BAD_GROUPS / N_GROUPS
    bad = rng.random(N_GROUPS) < share
    y, right = rng.integers(0, 2, n), rng.random(n) < P_REF
    cands = {}
    for c in NAMES:
        f = FLIP[c] if c != "fp16" else 0.01
        p_b = f / 2 + (loss / share) * bad[g]
        u = rng.random(n)
        ok = np.where(right, u >= p_b / P_REF, u < (f / 2) / (1 - P_REF))
        cands[c] = onehot(np.where(ok, y, 1 - y), 2)
    return (Draw(y, onehot(np.where(right, y, 1 - y), 2), cands,
                 [f"g{i}" for i in g.tolist()]), int(bad.sum()))


def few_bad_groups(bench, sims: int, rng: np.random.Generator, loss_factor: float) -> float:
    """The share of ``sims`` simulated experiments in which a candidate is recommended, the
    loss ``loss_factor`` times the bound (1: a recommendation is a false PASS)."""
    from quantkit.run.verdicts import signoff_threshold

    vv = _harness(bench)
    s = bench.row_settings()
    loss = float(loss_factor) * signoff_threshold(s, "accuracy") * vv.P_REF
    hits = 0
    for _ in range(sims):
        dev, _ = draw_few_bad(rng, DEV_GROUP, loss, vv)
        test, _ = draw_few_bad(rng, TEST_GROUP, loss, vv)
        ctx = bench.context(s, dev, test, ledger=bench.ledger())
        hits += vv.experiment(ctx, dev, test, shas=vv._shas(rng)).recommended is not None
    return hits / sims
