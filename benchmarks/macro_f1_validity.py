"""Is the macro-F1 sign-off valid? Simulate it with quantkit's own ``macro_f1_signoff``.

Each world gives the population cells P(label, FP32 prediction, candidate prediction); the
candidate's *population* macro-F1 (the macro-F1 of the expected counts) is exactly
``-margin`` (relative 1% of FP32's) below FP32's, found by bisection on the loss. Every
simulated test split draws n examples from the cells and calls
``quantkit.verdict.macro_f1.macro_f1_signoff`` (one-sided alpha 0.025, n_boot 2000, the
run's defaults); a PASS is a false PASS. The lossless world (same noise, no loss) gives
the power.

Worlds:

* ``balanced``: 2 classes 50/50, FP32 85% right, 4% of predictions change (the
  candidate's churn; as many right -> wrong as wrong -> right), plus the loss:
  FP32-right examples of class 1 moved to class 0.
* ``rare``: 3 classes 60/30/10, the loss only in the rare class (its FP32-right examples
  moved to class 0: each such change moves macro-F1 several times more than a common one).
* ``loss_only``: ``rare`` without churn: few changed predictions, the regime where a
  bootstrap alone has (almost) zero width.

Prints one row per world and n: false PASS +- its Monte-Carlo SE, whether the row is
within ``0.025 + 2 SE``, how often the bootstrap interval alone would have passed (what
the score bound is for), and the power (lossless world); last line
``macro_f1_false_pass_worst=<x> row=<world>:<n> rows_ok=<k>/<m> sims=<s>``.

    python benchmarks/macro_f1_validity.py [--sims 2000] [--sizes 100 500 1000 5000]
    python benchmarks/macro_f1_validity.py --smoke    # 20 simulations per row, n = 100
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.verdict import Margin, TestPolicy  # noqa: E402
from quantkit.verdict.macro_f1 import macro_f1, macro_f1_signoff  # noqa: E402

MARGIN = Margin("relative", 0.01)


@dataclass(frozen=True)
class World:
    name: str
    shares: tuple[float, ...]
    ref_right: float
    churn: float  # share of predictions the candidate changes at random
    loss_class: int  # FP32-right examples of this class move to class 0

    def cells(self, loss: float) -> np.ndarray:
        """P(y, r, q) as a (C, C, C) array. The churn is accuracy-neutral: a share churn / 2
        of the examples goes right -> wrong and as many wrong -> right. ``loss`` > 0 moves
        that share of loss_class's FP32-right examples to class 0; ``loss`` < 0 moves that
        share of its FP32-wrong examples to the right class (a gain)."""
        c = len(self.shares)
        p = np.zeros((c, c, c))
        a = self.churn / 2 / self.ref_right
        b = self.churn / 2 / (1 - self.ref_right)
        for y, py in enumerate(self.shares):
            for r in range(c):
                pr = py * (self.ref_right if r == y else (1 - self.ref_right) / (c - 1))
                if r == y:
                    p[y, r, r] += pr * (1 - a)
                    for q in range(c):
                        if q != r:
                            p[y, r, q] += pr * a / (c - 1)
                else:
                    p[y, r, r] += pr * (1 - b)
                    p[y, r, y] += pr * b
        k = self.loss_class
        if loss >= 0:
            moved = loss * p[k, k, k]
            p[k, k, k] -= moved
            p[k, k, 0] += moved
        else:
            for r in range(c):
                if r != k:
                    moved = -loss * p[k, r, r]
                    p[k, r, r] -= moved
                    p[k, r, k] += moved
        return p

    def population(self, loss: float) -> tuple[float, float]:
        p = self.cells(loss)
        true = p.sum(axis=(1, 2))
        pr, pq = p.sum(axis=(0, 2)), p.sum(axis=(0, 1))
        tr = np.array([p[c, c, :].sum() for c in range(p.shape[0])])
        tq = np.array([p[c, :, c].sum() for c in range(p.shape[0])])
        return float(macro_f1(true, pr, tr)), float(macro_f1(true, pq, tq))

    def null_loss(self) -> float:
        """The loss share at which the population delta is exactly -margin."""
        lo, hi = -1.0, 1.0
        for _ in range(80):
            mid = (lo + hi) / 2
            ref, cand = self.population(mid)
            if cand - ref > -MARGIN.value * ref:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2


WORLDS = (World("balanced", (0.5, 0.5), 0.85, 0.04, 1),
          World("rare", (0.6, 0.3, 0.1), 0.85, 0.04, 2),
          World("loss_only", (0.6, 0.3, 0.1), 0.85, 0.0, 2))


def draw(p: np.ndarray, n: int, rng: np.random.Generator):
    c = p.shape[0]
    idx = rng.choice(p.size, size=n, p=p.ravel() / p.sum())
    return idx // (c * c), (idx // c) % c, idx % c


def rate(world: World, n: int, sims: int, loss: float, seed: int
         ) -> tuple[float, float, float]:
    """(PASS rate, its SE, the rate the bootstrap interval alone would PASS)."""
    p = world.cells(loss)
    rng = np.random.default_rng([seed, n, len(world.name), int(loss > 0)])
    hits = boot_only = 0
    for i in range(sims):
        y, r, q = draw(p, n, rng)
        t = macro_f1_signoff(y, r, q, n_classes=p.shape[0], margin=MARGIN,
                             policy=TestPolicy(seed=int(i)))
        hits += t.status == "PASS"
        boot_only += t.n >= 100 and t.methods["bootstrap"]["low"] > t.threshold
    f = hits / sims
    return f, math.sqrt(max(f * (1 - f), 1e-12) / sims), boot_only / sims


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--power-sims", type=int, default=300)
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 500, 1000, 5000])
    ap.add_argument("--seed", type=int, default=0)
    _common.bench_args(ap, "20 simulations per row (5 for power), n = 100")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sims, args.power_sims, args.sizes = 20, 5, [100]
    t0 = time.perf_counter()
    print(f"macro_f1_signoff at the margin (relative 1%), one-sided alpha 0.025, "
          f"{args.sims} simulations per row (power: {args.power_sims})")
    print(f"{'world':>10} {'n':>6} {'loss':>7} {'false PASS':>15} {'bound':>7} {'ok':>3} "
          f"{'boot only':>10} {'power':>7}")
    worst, worst_row, ok_rows, rows = -1.0, "", 0, 0
    for w in WORLDS:
        loss = w.null_loss()
        for n in args.sizes:
            f, se, boot = rate(w, n, args.sims, loss, args.seed)
            bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.sims)
            ok = f <= bound
            pw = rate(w, n, args.power_sims, 0.0, args.seed + 1)[0]
            print(f"{w.name:>10} {n:>6} {loss:>7.4f} {f:.4f}±{se:.4f} {bound:>7.4f} "
                  f"{'yes' if ok else 'NO':>3} {boot:>10.4f} {pw:>7.3f}", flush=True)
            rows += 1
            ok_rows += ok
            if f > worst:
                worst, worst_row = f, f"{w.name}:{n}"
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"macro_f1_false_pass_worst={worst:.4f} row={worst_row} rows_ok={ok_rows}/{rows} "
          f"sims={args.sims}")
    return 0 if ok_rows == rows else 1


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("macro_f1_validity", main))
