"""Are the label-free sign-offs valid? Simulate them with quantkit's own ``score_signoff``.

Each row draws per-example scores of a candidate vs FP32 from a skewed or heavy-tailed
world whose true value sits exactly at the declared bound, and calls the run's decision
function, ``quantkit.verdict.score_signoff`` (one-sided alpha 0.025, n_boot 2000, the
run's defaults); a PASS is a false PASS.

* NEW (the run's test): the share of examples within the per-example tolerance
  (``verdict.min_cosine`` 0.99, ``max_kl`` 0.01, ``max_abs_logit`` 0.1, ``min_recall`` 0.9)
  against ``1 - verdict.score_quantile`` = 0.95, exact Clopper-Pearson bound. At the
  bound the true share within the tolerance is exactly 0.95.
* OLD (before issue 24, :func:`old_mean_test`, kept here as the baseline): a Student t
  interval of the mean, widened by the iid percentile bootstrap; at the bound the true
  mean is exactly the floor / ceiling.

Worlds: ``cosine``: 1% catastrophic examples (cosine 0.3-0.8), the rest ``1 - cos``
lognormal (sigma 1); ``kl``: lognormal KL (sigma 2); ``abs_logit``: lognormal |logit
delta| (sigma 1); ``recall``: recall@10 per query 1.0 / 0.9 / 0.5 (the 0.5s are 5%: at the
bound). Power: the same shapes with the true share within the tolerance 0.99.

Prints per world and n the false-PASS rate +- its Monte-Carlo SE (new and old), the
acceptance bound ``0.025 + 2 SE`` and the new test's power; last line
``labelfree_false_pass_worst=<x> row=<world>:<n> rows_ok=<k>/<m> sims=<s>``.

    python benchmarks/labelfree_validity.py [--sims 2000] [--sizes 100 500 1000]
    python benchmarks/labelfree_validity.py --smoke    # 20 simulations per row, n = 100
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import norm, t as student_t

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.verdict import TestPolicy, score_signoff  # noqa: E402

ALPHA = 0.025
QUANTILE = 0.05  # verdict.score_quantile (the default)
BOUNDS = {"cosine": 0.99, "kl": 0.01, "abs_logit": 0.1, "recall": 0.9}
METRIC = {"cosine": "cosine", "kl": "kl", "abs_logit": "abs_logit", "recall": "recall_at_k"}


def _lognormal_mu(bound: float, sigma: float, share: float) -> float:
    """mu with P(lognormal(mu, sigma) <= bound) = share."""
    return math.log(bound) - sigma * float(norm.ppf(share))


def draw(world: str, n: int, rng: np.random.Generator, *, share: float | None,
         mean: float | None = None) -> np.ndarray:
    """``n`` per-example scores; ``share``: true share within the tolerance (new null /
    power), or ``mean``: the true mean at the bound (old null)."""
    if world == "cosine":
        cat = rng.random(n) < 0.01
        if share is not None:  # P(cos >= 0.99) = share; the 1% catastrophic are outside
            mu = _lognormal_mu(1 - BOUNDS["cosine"], 1.0, share / 0.99)
        else:  # E[1 - cos] = 1 - mean: 0.01 * 0.45 + 0.99 * exp(mu + 1/2)
            mu = math.log(((1 - mean) - 0.01 * 0.45) / 0.99) - 0.5
        e = np.where(cat, rng.uniform(0.2, 0.7, n), rng.lognormal(mu, 1.0, n))
        return np.clip(1.0 - e, -1.0, 1.0)
    if world in ("kl", "abs_logit"):
        sigma = 2.0 if world == "kl" else 1.0
        mu = (_lognormal_mu(BOUNDS[world], sigma, share) if share is not None
              else math.log(mean) - sigma * sigma / 2)
        return rng.lognormal(mu, sigma, n)
    # recall@10: 1.0 / 0.9 / 0.5; P(recall >= 0.9) = share
    if share is None:  # mean at 0.9: 1.0 (a), 0.9 (b), 0.5 (c): a + 0.9 b + 0.5 c = 0.9
        c = 0.1
        a = (0.9 - 0.9 * (1 - c) - 0.5 * c) / 0.1
        p = [a, 1 - c - a, c]
    else:
        p = [share - 0.15, 0.15, 1 - share]
    return rng.choice([1.0, 0.9, 0.5], size=n, p=p)


def old_mean_test(v: np.ndarray, *, bound: float, higher: bool, n_boot: int,
                  rng: np.random.Generator) -> bool:
    """PASS of the test of the mean before issue 24: the wider of a Student t interval
    (df n - 1) and the iid percentile bootstrap, one-sided alpha 0.025 each side."""
    n = v.size
    mean, sd = float(v.mean()), float(v.std(ddof=1))
    q = float(student_t.ppf(1 - ALPHA, n - 1))
    boots = rng.choice(v, size=(n_boot, n)).mean(axis=1)
    low = min(mean - q * sd / math.sqrt(n), float(np.quantile(boots, ALPHA)))
    high = max(mean + q * sd / math.sqrt(n), float(np.quantile(boots, 1 - ALPHA)))
    return low > bound if higher else high < bound


def _rate(hits: int, sims: int) -> tuple[float, float]:
    p = hits / sims
    return p, math.sqrt(max(p * (1 - p), 1e-12) / sims)


def row(world: str, n: int, sims: int, old_sims: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, n, len(world)])
    bound, metric = BOUNDS[world], METRIC[world]
    new = sum(score_signoff(draw(world, n, rng, share=1 - QUANTILE), metric=metric,
                            threshold=bound, quantile=QUANTILE,
                            policy=TestPolicy(seed=i)).status == "PASS"
              for i in range(sims))
    power = sum(score_signoff(draw(world, n, rng, share=0.99), metric=metric, threshold=bound,
                              quantile=QUANTILE, policy=TestPolicy(seed=i)).status == "PASS"
                for i in range(max(sims // 4, 1)))
    old = sum(old_mean_test(draw(world, n, rng, share=None, mean=bound), bound=bound,
                            higher=world in ("cosine", "recall"), n_boot=2000, rng=rng)
              for _ in range(old_sims))
    return {"new": _rate(new, sims), "power": _rate(power, max(sims // 4, 1)),
            "old": _rate(old, old_sims)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=2000, help="simulations per row (new test)")
    ap.add_argument("--old-sims", type=int, default=1000, help="simulations of the old test")
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 500, 1000])
    ap.add_argument("--worlds", nargs="*", default=list(BOUNDS))
    ap.add_argument("--seed", type=int, default=0)
    _common.bench_args(ap, "20 simulations per row (10 of the old test), n = 100")
    args = ap.parse_args(argv)
    if args.smoke:
        args.sims, args.old_sims, args.sizes = 20, 10, [100]
    t0 = time.perf_counter()
    bound = 0.025 + 2 * math.sqrt(0.025 * 0.975 / args.sims)
    print(f"score_signoff (share within the tolerance >= {1 - QUANTILE:g}, exact binomial) at "
          f"the bound, one-sided alpha {ALPHA}, {args.sims} simulations per row; old = the "
          f"mean test (t + percentile bootstrap) at its bound, {args.old_sims} simulations")
    print(f"{'world':>10} {'n':>5} {'false PASS new':>16} {'bound':>7} {'ok':>3} "
          f"{'false PASS old':>16} {'power new':>10}")
    worst, worst_row, ok_rows, rows = -1.0, "", 0, 0
    for world in args.worlds:
        for n in args.sizes:
            r = row(world, n, args.sims, args.old_sims, args.seed)
            f, se = r["new"]
            ok = f <= bound
            print(f"{world:>10} {n:>5} {f:>9.4f}±{se:.4f} {bound:>7.4f} "
                  f"{'yes' if ok else 'NO':>3} "
                  f"{r['old'][0]:>9.4f}±{r['old'][1]:.4f} {r['power'][0]:>10.3f}", flush=True)
            rows += 1
            ok_rows += ok
            if f > worst:
                worst, worst_row = f, f"{world}:{n}"
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"labelfree_false_pass_worst={worst:.4f} row={worst_row} rows_ok={ok_rows}/{rows} "
          f"sims={args.sims}")
    return 0 if ok_rows == rows else 1


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("labelfree_validity", main))
