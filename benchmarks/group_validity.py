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

``--few`` (issue 49, point 7) runs instead the worlds where the whole loss sits in a few
groups, 6,000 examples in G of 75 / 80 / 100 groups:

* ``few<k>`` (k = 3..6): each group of the split carries the loss with probability k / G
  (k of G groups of the population; a split holds k on average, sometimes none), a bad
  group's delta G / k times the margin;
* ``fixed<k>``: exactly k bad groups in every split (chosen at random);

with columns: the false-PASS rate of ``paired_signoff``, of its Tango (Rao-Scott) and
bootstrap-t intervals alone, of the test with two small-sample cluster corrections added to
its envelope (:func:`cr2_bm_low`: CR2 / Bell-McCaffrey variance with Satterthwaite df;
:func:`wild_restricted_p`: the wild cluster bootstrap-t with the null imposed, Rademacher
weights), the share of splits that drew no bad group, and the false PASS of those splits;
last line ``few_worst=<world>:<G>:<rate> sims=<s>``.

Prints per world and number of groups the false-PASS rate +- its Monte-Carlo SE against
``0.025 + 2 SE``; ``--baseline`` adds, for the accuracy worlds, the rate of the grouped
test before issue 24 (:func:`old_percentile_test`: the same Tango interval on Rao-Scott
counts, enveloped with the *percentile* cluster bootstrap); last line
``min_groups_needed=<G> worst_at_or_above=<world>:<G>:<x> sims=<s> MIN_GROUPS=<current>``:
the smallest G of the grid from which every row of every world is within the bound.

    python benchmarks/group_validity.py [--sims 2000] [--groups 10 20 30 50 75 100 200]
    python benchmarks/group_validity.py --smoke    # 20 simulations, 75 and 200 groups
    python benchmarks/group_validity.py --few [--sims 2000]
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
from scipy.stats import t as student_t  # noqa: E402
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


def few_world(g: int, size: int, k: int, fixed: bool, rng: np.random.Generator):
    """(FP32 correct, candidate correct, groups, bad groups drawn): the loss in k of G groups
    of the population (``fixed``: exactly k of the split's), population delta -margin."""
    n = g * size
    groups = np.repeat(np.arange(g), size)
    if fixed:
        bad = np.zeros(g, dtype=bool)
        bad[rng.choice(g, k, replace=False)] = True
    else:
        bad = rng.random(g) < k / g
    m = MARGIN.value * P_REF
    p_b = FLIP / 2 + (m * g / k) * bad[groups]
    ref = rng.random(n) < P_REF
    u = rng.random(n)
    cand = np.where(ref, u >= p_b / P_REF, u < (FLIP / 2) / (1 - P_REF))
    return ref, cand, groups, int(bad.sum())


def cr2_bm(sums: np.ndarray, sizes: np.ndarray) -> tuple[float, float, float]:
    """(ratio mean, CR2 standard error, df) from each group's sum and size: the CR2 variance
    (Bell & McCaffrey 2002, Survey Methodology 28:169-181; the intercept's leverage in group
    g is n_g / N, so its residual sum is divided by sqrt(1 - n_g / N)) and the Satterthwaite
    df of that variance under iid errors (Imbens & Kolesar 2016, Rev Econ Stat 98:701-712;
    G - 1 for equal groups, where CR2 is CR1)."""
    n = float(sizes.sum())
    mu = float(sums.sum()) / n
    w = 1.0 / ((1.0 - sizes / n) * n * n)
    var = float(np.sum(w * (sums - mu * sizes) ** 2))
    tr = float(np.sum(w * sizes * (1.0 - sizes / n)))
    tr2 = float(np.sum(w ** 2 * sizes ** 2) - 2.0 * np.sum(w ** 2 * sizes ** 3) / n
                + np.sum(w * sizes ** 2) ** 2 / n ** 2)
    return mu, math.sqrt(var), tr * tr / tr2


def cr2_bm_low(sums: np.ndarray, sizes: np.ndarray, alpha: float = 0.025) -> float:
    """Lower one-sided (1 - alpha) bound of the ratio mean: CR2 with t(df) (:func:`cr2_bm`)."""
    mu, se, df = cr2_bm(sums, sizes)
    return mu - float(student_t.ppf(1.0 - alpha, df)) * se


def wild_restricted_p(sums: np.ndarray, sizes: np.ndarray, threshold: float, *,
                      rng: np.random.Generator, n_boot: int = 2000) -> float:
    """One-sided p of "mean <= threshold": the wild cluster bootstrap-t with the null
    imposed (WCR; Cameron, Gelbach & Miller 2008; MacKinnon & Webb 2017, J Appl Econ
    32:233-254), Rademacher weights, CR1 standard errors."""
    g, n = sizes.size, float(sizes.sum())

    def t_of(s: np.ndarray) -> np.ndarray:
        mu = s.sum(axis=-1) / n
        ss = np.sum((s - mu[..., None] * sizes) ** 2, axis=-1)
        return (mu - threshold) / np.sqrt(g / (g - 1) * ss / n ** 2)

    u = sums - threshold * sizes
    v = rng.integers(0, 2, (n_boot, g)) * 2.0 - 1.0
    t_obs = float(t_of(sums[None])[0])
    return (1 + int(np.count_nonzero(t_of(threshold * sizes + v * u) >= t_obs))) / (n_boot + 1)


def few_rates(world: str, g: int, sims: int, seed: int) -> dict[str, float]:
    """False-PASS rates of one ``few<k>`` / ``fixed<k>`` world at G groups (``--few``)."""
    k, fixed = int("".join(ch for ch in world if ch.isdigit())), world.startswith("fixed")
    rng = np.random.default_rng([seed, g, k, int(fixed)])
    keys = ("signoff", "tango", "boot_t", "cr2_bm", "wild_r", "none_drawn", "none_pass")
    c = dict.fromkeys(keys, 0)
    for i in range(sims):
        ref, cand, groups, drawn = few_world(g, 6000 // g, k, fixed, rng)
        t = paired_signoff(ref, cand, margin=MARGIN, groups=groups,
                           policy=TestPolicy(seed=i, min_groups=2))
        d = cand.astype(np.float64) - ref.astype(np.float64)
        sums = np.bincount(groups, weights=d, minlength=g)
        sizes = np.bincount(groups, minlength=g).astype(np.float64)
        ok = t.status == "PASS"
        c["signoff"] += ok
        c["tango"] += t.methods["score"]["low"] > t.threshold
        c["boot_t"] += t.methods["bootstrap"]["low"] > t.threshold
        c["cr2_bm"] += ok and cr2_bm_low(sums, sizes) > t.threshold
        c["wild_r"] += ok and wild_restricted_p(sums, sizes, t.threshold,
                                                rng=np.random.default_rng(i)) <= 0.025
        c["none_drawn"] += drawn == 0
        c["none_pass"] += ok and drawn == 0
    return {key: v / sims for key, v in c.items()}


def few_main(args) -> int:
    """``--few``: the loss in a few groups (module docstring)."""
    t0 = time.perf_counter()
    bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.sims)
    print(f"false PASS with the loss in k of G groups, 6,000 examples, one-sided alpha 0.025, "
          f"{args.sims} simulations per row, min_groups=2; bound {bound:.4f}; +cr2_bm / "
          f"+wild_r: the sign-off with that interval added to its envelope")
    print(f"{'world':>7} {'G':>4} {'signoff':>15} {'tango':>7} {'boot_t':>7} {'+cr2_bm':>8} "
          f"{'+wild_r':>8} {'none_drawn':>10} {'none&PASS':>9} {'ok':>3}")
    worst = (-1.0, "")
    for world in args.few_worlds:
        for g in args.few_groups:
            r = few_rates(world, g, args.sims, args.seed)
            p = r["signoff"]
            se = math.sqrt(max(p * (1 - p), 1e-12) / args.sims)
            print(f"{world:>7} {g:>4} {p:>8.4f}±{se:.4f} {r['tango']:>7.4f} {r['boot_t']:>7.4f} "
                  f"{r['cr2_bm']:>8.4f} {r['wild_r']:>8.4f} {r['none_drawn']:>10.4f} "
                  f"{r['none_pass']:>9.4f} {'yes' if p <= bound else 'NO':>3}", flush=True)
            worst = max(worst, (p, f"{world}:{g}"))
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"few_worst={worst[1]}:{worst[0]:.4f} sims={args.sims}")
    return 0 if worst[0] <= bound else 1


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
    ap.add_argument("--few", action="store_true",
                    help="the loss in a few groups instead (issue 49, point 7)")
    ap.add_argument("--few-worlds", nargs="*", default=["few3", "few4", "few5", "few6",
                                                        "fixed4"])
    ap.add_argument("--few-groups", type=int, nargs="*", default=[75, 80, 100])
    _common.bench_args(ap, "20 simulations per row, 75 and 200 groups")
    args = ap.parse_args(argv)
    if args.few:
        if args.smoke:
            args.sims, args.few_worlds, args.few_groups = 20, ["few4", "fixed4"], [80]
        return few_main(args)
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
