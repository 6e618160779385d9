"""How often is a candidate recommended whose engine differs from the emulation?

Simulates the engine check (quantkit/verdict/engine_gate.py) with the run's own decision
path: per simulated run, the engine's disagreement with the emulation on ``n`` compared dev
examples is drawn, gated (``flip_gate`` for top-1 flips; ``score_gate`` for per-example KL),
put in a ``BackendCheck`` that gates on the deployment runtime, turned into the run's
``blocked_by_engine`` and passed to ``recommend_candidate`` with a family whose only member
PASSed its sign-off; the row reports how often that candidate is recommended.

Rows (flips): bert_int8's margin (relative 1% of FP32 accuracy 0.77, 0.0077 absolute),
engine tolerance ``t = share * margin`` (share 0.5), true flip rates 0, t/4, t/2, t, the
whole margin (2t) and 1.5x the margin, at n = 1,000 / 3,000 / 6,000 compared examples.
Before issue 24 a check that was merely not FAIL let the candidate through (how often:
benchmarks/results/engine_gate.md). Rows (KL): per-example KL(emulation ||
engine) lognormal (sigma 1.5, skewed) with a share q/4, q and 2q of the examples above the
tolerance t = share^2 * 0.01 = 0.0025 (``max_kl=0.01``), q = share * 0.05 the engine's part of
``verdict.score_quantile``.

    python benchmarks/engine_gate.py [--sims 20000] [--kl-sims 400]
    python benchmarks/engine_gate.py --smoke     # 200 / 2 runs per row

Last line: ``recommended_at_margin=<max over n> recommended_at_tolerance=<max over n>
recommended_faithful_n3000=<x>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.run.stages.backend_check import BackendCheck
from quantkit.run.stages.recommend import blocked_by_engine
from quantkit.verdict import (Margin, TestPolicy, decide_family, declare_family,  # noqa: E402
                              paired_signoff, recommend_candidate)
from quantkit.verdict.engine_gate import (flip_gate, score_gate, split_budget,  # noqa: E402
                                         split_quantile)

ALPHA = 0.025
NAME = "int8.entropy"


def passing_decision():
    rng = np.random.default_rng(0)
    correct = rng.random(6000) < 0.77
    t = paired_signoff(correct, correct.copy(), margin=Margin("absolute", 0.00385),
                       policy=TestPolicy(alpha=ALPHA, n_boot=200, seed=0))
    family = declare_family({NAME: t}, alpha=ALPHA)
    return decide_family(family, {NAME: t})


def recommended(decision, status: str) -> bool:
    check = BackendCheck.of({"status": status, "gates_recommendation": True,
                                 "what_to_run": "rerun"})
    rec = recommend_candidate(decision, int8_nodes={NAME: 48},
                              blocked=blocked_by_engine({NAME: check}))
    return rec.candidate == NAME


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=20000)
    ap.add_argument("--kl-sims", type=int, default=400)
    _common.bench_args(ap, "200 simulated runs per flip row, 2 per KL row")
    a = ap.parse_args()
    if a.smoke:
        a.sims, a.kl_sims = 200, 2
    decision = passing_decision()
    margin = 0.01 * 0.77
    tol = split_budget("accuracy", margin, 0.5).tolerance
    rng = np.random.default_rng(24)
    at_margin, at_tol, faithful = [], [], None
    print(f"flips: margin {margin:.4f}, tolerance {tol:.5f}, {a.sims} simulated runs per row "
          "(CPU shared)")
    print(f"  {'n':>6} {'true flip rate':>16} {'recommended':>12} {'SE':>7}")
    for n in (1000, 3000, 6000):
        for label, f in (("0", 0.0), ("t/4", tol / 4), ("t/2", tol / 2), ("t", tol),
                         ("margin", margin), ("1.5 margin", 1.5 * margin)):
            flips = rng.binomial(n, f, size=a.sims)
            status = {int(k): flip_gate(int(k), n, tolerance=tol,
                                                  policy=TestPolicy(alpha=ALPHA)).status
                      for k in np.unique(flips)}
            ok = {k: recommended(decision, s) for k, s in status.items()}
            rate = float(np.mean([ok[int(k)] for k in flips]))
            se = np.sqrt(max(rate * (1 - rate), 1e-12) / a.sims)
            print(f"  {n:>6} {label + f' ({f:.5f})':>16} {rate:>12.4f} {se:>7.4f}")
            if label == "margin":
                at_margin.append(rate)
            if label == "t":
                at_tol.append(rate)
            if label == "t/4" and n == 3000:
                faithful = rate
    kl_tol = split_budget("kl", 0.01, 0.5).tolerance
    q_e = split_quantile(0.05, 0.5)[1]  # the engine's part of verdict.score_quantile
    print(f"KL(emulation || engine), lognormal sigma 1.5, tolerance {kl_tol:.4f}, share "
          f"outside it allowed {q_e:.4f}, {a.kl_sims} runs per row")
    t0 = time.perf_counter()
    for n in (1000, 3000):
        for label, out in (("q/4", q_e / 4), ("q", q_e), ("2q", 2 * q_e)):
            sigma = 1.5  # P(KL > tolerance) = out
            mu = np.log(kl_tol) - sigma * norm.ppf(1.0 - out)
            rec = [recommended(decision, score_gate(rng.lognormal(mu, sigma, size=n), metric="kl",
                                                    tolerance=kl_tol, quantile=q_e,
                                                    policy=TestPolicy(
                                                        alpha=ALPHA, n_boot=500, seed=i)).status)
                   for i in range(a.kl_sims)]
            rate = float(np.mean(rec))
            se = np.sqrt(max(rate * (1 - rate), 1e-12) / a.kl_sims)
            print(f"  {n:>6} {label + f' ({out:.5f})':>16} {rate:>12.4f} {se:>7.4f}")
    print(f"  ({time.perf_counter() - t0:.0f} s)")
    print(f"recommended_at_margin={max(at_margin):.4f} recommended_at_tolerance="
          f"{max(at_tol):.4f} recommended_faithful_n3000={faithful:.4f}")


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("engine_gate", main))
