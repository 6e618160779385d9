"""Alpha spending across looks (quantkit/verdict/ledger.py): why gamma = 0.1, and what the
ledger does to re-tests and re-seeds. Simulated with the run's own ``paired_signoff``.

World (bert_int8-like): discordant rate f = 0.02, absolute margin m = 0.0085 (1% of 0.85),
one-sided alpha 0.025, the test size planned for 80% power at alpha by the Nam formula
(n = 2,399). Counts are drawn per cell (the rule depends on the data only through them).

1. Power (true delta 0) for each gamma: P(PASS at look 1) at alpha_1 = (1 - gamma) alpha, and
   P(PASS by look 2) when an INCONCLUSIVE is re-tested on a split grown to 2n (the first n
   plus n new) at alpha_2 = (1 - gamma) gamma alpha; gamma 0 = no ledger (full alpha twice).
2. False PASS (true delta = -m, a candidate exactly at the margin) for the same plans.
3. Re-seeds: a pool of 5n examples, each seed re-draws n of them (overlapping test sets, as
   ``seed`` re-draws the partition); "best of K" = PASS on any of K seeds, without the
   ledger (alpha each time) and with it (look k at the rule's alpha_k, via look_alpha).

Usage: ``python benchmarks/ledger_spending.py [--sims 4000]`` (``--smoke``: 5 simulations). Last line:
``gamma=<g> look1_power=<p> by_look2_power=<p> false_pass_best_of_5_reseeds=<x> (no ledger <y>)``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.verdict import Margin, TestPolicy, paired_signoff, required_test_size  # noqa: E402
from quantkit.verdict.ledger import SPENDING_RATIO, SpentLook, look_alpha  # noqa: E402

ALPHA, F, M = 0.025, 0.02, 0.0085
GAMMAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)


def passes(b: int, c: int, n: int, alpha: float, rng: np.random.Generator) -> bool:
    r = np.ones(n, bool)
    cand = np.ones(n, bool)
    r[:c] = False  # only the candidate right
    cand[c:c + b] = False  # only FP32 right
    return paired_signoff(r, cand, margin=Margin("absolute", M),
                          policy=TestPolicy(alpha=alpha, n_boot=2000, seed=rng)
                          ).status == "PASS"


def two_looks(delta: float, n: int, sims: int, seed: int) -> dict[float, tuple[float, float]]:
    """gamma -> (P(PASS at look 1), P(PASS by look 2 on the grown split))."""
    rng = np.random.default_rng(seed)
    pb, pc = (F - delta) / 2, (F + delta) / 2
    out = {g: [0, 0] for g in GAMMAS}
    for _ in range(sims):
        d1 = rng.multinomial(n, [pb, pc, 1 - pb - pc])
        d2 = rng.multinomial(n, [pb, pc, 1 - pb - pc])
        b1, c1 = d1[0], d1[1]
        b2, c2 = b1 + d2[0], c1 + d2[1]
        for g in GAMMAS:
            a1 = ALPHA if g == 0 else ALPHA * (1 - g)
            a2 = ALPHA if g == 0 else ALPHA * (1 - g) * g
            p1 = passes(b1, c1, n, a1, rng)
            p2 = p1 or passes(b2, c2, 2 * n, a2, rng)
            out[g][0] += p1
            out[g][1] += p2
    return {g: (v[0] / sims, v[1] / sims) for g, v in out.items()}


def reseeds(n: int, k: int, sims: int, seed: int) -> tuple[float, float]:
    """P(any PASS in k re-seeds of the same pool) at the margin: (no ledger, ledger)."""
    rng = np.random.default_rng(seed)
    pb, pc = (F + M) / 2, (F - M) / 2  # delta = -m
    spent: list[SpentLook] = []
    alphas = []
    for _ in range(k):
        a = look_alpha(ALPHA, spent)
        alphas.append(a.alpha)
        spent.append(SpentLook(a.alpha, ALPHA))
    hit = [0, 0]
    for _ in range(sims):
        cells = rng.choice(3, size=5 * n, p=[pb, pc, 1 - pb - pc])
        any_free = any_charged = False
        for look in range(k):
            draw = cells[rng.choice(5 * n, size=n, replace=False)]
            b, c = int(np.count_nonzero(draw == 0)), int(np.count_nonzero(draw == 1))
            any_free = any_free or passes(b, c, n, ALPHA, rng)
            any_charged = any_charged or passes(b, c, n, alphas[look], rng)
        hit[0] += any_free
        hit[1] += any_charged
    return hit[0] / sims, hit[1] / sims


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000)
    ap.add_argument("--reseeds", type=int, default=5)
    _common.bench_args(ap, "5 simulations per cell")
    a = ap.parse_args(argv)
    if a.smoke:
        a.sims = 5
    n = required_test_size(flip_rate=F, delta=0.0, margin_abs=M, alpha=ALPHA, power=0.8)
    t0 = time.perf_counter()
    print(f"n planned {n} (Nam, 80% power at one-sided alpha {ALPHA}); {a.sims} simulations")
    power = two_looks(0.0, n, a.sims, 0)
    false = two_looks(-M, n, a.sims, 1)
    print("gamma  look1_power  by_look2_power(grown 2n)  false_pass_look1  false_pass_by_look2")
    for g in GAMMAS:
        se = (power[g][0] * (1 - power[g][0]) / a.sims) ** 0.5
        print(f"{g:5g}  {power[g][0]:.3f} (SE {se:.3f})  {power[g][1]:.3f}  "
              f"{false[g][0]:.4f}  {false[g][1]:.4f}" + ("   <- no ledger" if g == 0 else ""))
    free, charged = reseeds(n, a.reseeds, a.sims, 2)
    se = (charged * (1 - charged) / a.sims) ** 0.5
    print(f"best of {a.reseeds} re-seeds of the same pool at the margin: false PASS {free:.4f} "
          f"without the ledger, {charged:.4f} (SE {se:.4f}) with it (gamma {SPENDING_RATIO:g})")
    print(f"seconds {time.perf_counter() - t0:.0f}")
    g = SPENDING_RATIO
    print(f"gamma={g:g} look1_power={power[g][0]:.3f} by_look2_power={power[g][1]:.3f} "
          f"false_pass_best_of_{a.reseeds}_reseeds={charged:.4f} (no ledger {free:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("ledger_spending", main))
