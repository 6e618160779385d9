"""How many groups does a grouped sign-off need? Simulate it with quantkit's own tests.

Grouped data (reviews of one movie, frames of one video) is resampled by group; with few
groups the loss can sit in groups the test split happened not to draw, and the spread
between groups is estimated from few of them. Each row here is a world where the
candidate loses exactly the margin on average over the population of groups, with the
whole loss in 10% of the groups (each group of the test split carries it with probability
0.1, independently: the split is a sample of groups), and calls the run's decision
functions with ``min_groups=2`` (the raw rate of the interval; ``verdict.min_groups``
then makes every row below it INCONCLUSIVE):

* ``accuracy``: ``quantkit.verdict.paired_signoff`` (Tango on Rao-Scott counts, cluster
  bootstrap-t), FP32 accuracy 0.77, relative margin 1% (0.0077), 5% of predictions
  flipping in every group (half each way), the loss in 10% of groups (their delta 10x the
  margin); 6,000 examples in G groups (``n6000``) or groups of 25 (``g25``).
* ``cosine_share``: ``quantkit.verdict.score_signoff`` (exact binomial share on Rao-Scott
  counts, cluster bootstrap-t): 1% of examples outside the per-example tolerance in every
  group, 41% in the 10% bad groups: 5% overall, exactly the declared share 0.95.

Prints per world and number of groups the false-PASS rate +- its Monte-Carlo SE against
``0.025 + 2 SE``; ``--baseline`` adds, for the accuracy worlds, the rate of the grouped
test before issue 24 (:func:`old_percentile_test`: the same Tango interval on Rao-Scott
counts, enveloped with the *percentile* cluster bootstrap); last line
``min_groups_needed=<G> worst_at_or_above=<world>:<G>:<x> sims=<s> MIN_GROUPS=<current>``:
the smallest G of the grid from which every row of every world is within the bound.

    python benchmarks/group_validity.py [--sims 2000] [--groups 10 20 30 50 75 100 200]
    python benchmarks/group_validity.py --smoke    # 20 simulations, 75 and 200 groups
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.verdict import (Margin, TestPolicy, margin_abs, paired_signoff,  # noqa: E402
                              score_signoff)
from quantkit.verdict.cluster import (cluster_bootstrap_means,  # noqa: E402
                                      intra_group_correlation)
from quantkit.verdict.score import tango_interval  # noqa: E402
from quantkit.verdict.policy import MIN_GROUPS  # noqa: E402

MARGIN = Margin("relative", 0.01)
P_REF, FLIP, BAD_SHARE = 0.77, 0.05, 0.1


def accuracy_world(g: int, size: int, rng: np.random.Generator):
    """(FP32 correct, candidate correct, groups): mean delta over groups exactly -margin."""
    n = g * size
    groups = np.repeat(np.arange(g), size)
    bad = rng.random(g) < BAD_SHARE
    m = MARGIN.value * P_REF
    p_b = FLIP / 2 + (m / BAD_SHARE) * bad[groups]  # P(FP32 right, candidate wrong)
    ref = rng.random(n) < P_REF
    u = rng.random(n)
    cand = np.where(ref, u >= p_b / P_REF, u < (FLIP / 2) / (1 - P_REF))
    return ref, cand, groups


def share_world(g: int, size: int, rng: np.random.Generator):
    """(per-example cosine, groups): 5% outside the 0.99 tolerance over the population."""
    n = g * size
    groups = np.repeat(np.arange(g), size)
    bad = rng.random(g) < BAD_SHARE
    outside = rng.random(n) < 0.01 + 0.4 * bad[groups]
    return np.where(outside, 0.9, 0.999), groups


def old_percentile_test(ref: np.ndarray, cand: np.ndarray, groups: np.ndarray, *,
                        seed: int, alpha: float = 0.025, n_boot: int = 2000) -> bool:
    """PASS of the grouped accuracy test before issue 24: Tango on the Rao-Scott counts,
    enveloped with the percentile cluster bootstrap (kept here as the baseline)."""
    d = cand.astype(float) - ref.astype(float)
    g = int(groups.max()) + 1
    deff = intra_group_correlation(d, groups, g).design_effect
    b, c, n = float(np.sum(ref & ~cand)), float(np.sum(~ref & cand)), float(d.size)
    low = tango_interval(b / deff, c / deff, n / deff, alpha=2 * alpha)[0]
    boots = cluster_bootstrap_means(d, groups, g, n_boot=n_boot,
                                    rng=np.random.default_rng(seed))[1]
    m = margin_abs(MARGIN, float(ref.mean()))
    return min(low, float(np.quantile(boots, alpha))) > -m


def false_pass(world: str, g: int, size: int, sims: int, seed: int, baseline: bool = False
               ) -> tuple[float, float, float | None]:
    """(false-PASS rate, its SE, the baseline's rate or None)."""
    rng = np.random.default_rng([seed, g, size, len(world)])
    hits = old = 0
    for i in range(sims):
        if world.startswith("accuracy"):
            ref, cand, groups = accuracy_world(g, size, rng)
            t = paired_signoff(ref, cand, margin=MARGIN, groups=groups,
                               policy=TestPolicy(seed=i, min_groups=2))
            if baseline:
                old += old_percentile_test(ref, cand, groups, seed=i)
        else:
            cos, groups = share_world(g, size, rng)
            t = score_signoff(cos, metric="cosine", threshold=0.99, quantile=0.05,
                              groups=groups, policy=TestPolicy(seed=i, min_groups=2))
        hits += t.status == "PASS"
    p = hits / sims
    base = old / sims if baseline and world.startswith("accuracy") else None
    return p, math.sqrt(max(p * (1 - p), 1e-12) / sims), base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--groups", type=int, nargs="*", default=[10, 20, 30, 50, 75, 100, 200])
    ap.add_argument("--worlds", nargs="*", default=["accuracy_n6000", "accuracy_g25",
                                                    "cosine_share_g25"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", action="store_true",
                    help="also the percentile cluster bootstrap of before issue 24")
    _common.bench_args(ap, "20 simulations per row, 75 and 200 groups")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sims, args.groups = 20, [75, 200]
    t0 = time.perf_counter()
    bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.sims)
    print(f"false PASS with the loss in 10% of groups (each group bad w.p. 0.1), one-sided "
          f"alpha 0.025, {args.sims} simulations per row, raw (min_groups=2); bound "
          f"0.025 + 2 SE = {bound:.4f}")
    print(f"{'world':>18} {'groups':>6} {'size':>5} {'false PASS':>15} {'ok':>3}")
    bad_at: dict[int, list[str]] = {g: [] for g in args.groups}
    worst: dict[int, tuple[float, str]] = {}
    for world in args.worlds:
        for g in args.groups:
            size = 6000 // g if world.endswith("n6000") else 25
            p, se, base = false_pass(world, g, size, args.sims, args.seed, args.baseline)
            ok = p <= bound
            print(f"{world:>18} {g:>6} {size:>5} {p:>8.4f}±{se:.4f} {'yes' if ok else 'NO':>3}"
                  + (f"  baseline (percentile) {base:.4f}" if base is not None else ""),
                  flush=True)
            if not ok:
                bad_at[g].append(world)
            if p > worst.get(g, (-1.0, ""))[0]:
                worst[g] = (p, world)
    needed = None
    for g in sorted(args.groups, reverse=True):
        if bad_at[g]:
            break
        needed = g
    above = [(worst[g][0], f"{worst[g][1]}:{g}") for g in args.groups
             if needed is not None and g >= needed]
    w = max(above) if above else (float("nan"), "none")
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"min_groups_needed={needed} worst_at_or_above={w[1]}:{w[0]:.4f} sims={args.sims} "
          f"MIN_GROUPS={MIN_GROUPS}")
    return 0 if needed is not None and needed <= MIN_GROUPS else 1


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("group_validity", main))
