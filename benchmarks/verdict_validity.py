"""Is the sign-off valid? Simulate the whole protocol with quantkit's own functions.

Every model evaluation is replaced by simulated per-example correctness (no models run);
every decision is made by the project's code:

* NEW protocol (issue 15): on a simulated *dev* split, the calibrator is chosen by dev
  accuracy, layers are ranked (``quantkit.precision.sensitivity.rank`` over noisy proxy
  scores), the real ``search_fp16_set`` (``quantkit.precision.search``) runs with
  ``paired_signoff`` on dev as its verdict; the family (fp16, the best INT8 by dev, mixed when
  the search found a dev PASS) is declared with ``declare_family`` and power-planned with
  ``plan_family``; on a *fresh* test split each member is evaluated once (``TestLedger``),
  decided with ``decide_family`` (fixed sequence, one-sided alpha 0.025) and
  ``recommend_candidate`` picks among test PASSes.
* OLD protocol (before issue 15): the same choices and the sign-off on one split, with the
  old verdict (:func:`old_verdict`: two-sided 95% percentile bootstrap of the accuracy
  delta, the rule quantkit used before the sign-off; kept here as the baseline) and the old
  recommendation (the PASS with the most INT8 nodes among fp16, every INT8 calibrator and
  mixed).

Worlds: ``null``: every candidate (each calibrator, fp16, every mixed set) truly loses
exactly the margin, so any recommendation is a false PASS; ``lossless``: every candidate
truly loses nothing. Candidates' flips are correlated (shared per-example latent draws), with
flip rates about those measured on bert_int8 (INT8 ~5%, FP16 ~0.5%).

Prints, per test size, the false-PASS rate of the recommended candidate (null world) and the
power (lossless world: the best INT8 candidate PASSes on test after familywise control; and
any recommendation), with Monte-Carlo standard errors, for both protocols. Last line:
``false_pass_recommended=<x> power_lossless=<y> n_test=<n>`` for ``--n-test`` (the
bert_int8 default test size, ~6,000 unless told).

    python benchmarks/verdict_validity.py [--n-test 6000] [--n-dev 2500] [--sims 1500]
    python benchmarks/verdict_validity.py --group-size 20   # grouped data (movies)
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

from quantkit.precision.search import EvalResult, search_fp16_set  # noqa: E402
from quantkit.precision.sensitivity import rank  # noqa: E402
from quantkit.verdict import (  # noqa: E402
    FAIL, INCONCLUSIVE, PASS, Margin, TestLedger, decide_family, declare_family, margin_abs,
    paired_signoff, plan_family, recommend_candidate)
from quantkit.verdict.stats import accuracy_deltas  # noqa: E402

CALIBRATORS = ("int8.minmax", "int8.entropy", "int8.mse")


@dataclass(frozen=True)
class World:
    name: str
    delta: float  # every candidate's true accuracy delta
    p_ref: float = 0.77  # FP32 accuracy (bert_int8 SST-2 style)
    flip_int8: float = 0.05
    flip_fp16: float = 0.005
    layers: int = 48
    rho: float = 0.7  # share of a candidate's latent draws common to its calibrator's sets
    group_size: int = 0  # > 0: examples come in groups (movies) of this size ...
    group_shape: float = 1.0  # ... whose flip rates vary by a Gamma(shape, 1/shape) factor

    def flip(self, fp16_layers: int) -> float:
        f = self.flip_int8 + (self.flip_fp16 - self.flip_int8) * fp16_layers / self.layers
        return max(f, abs(self.delta) + 0.002)  # a delta of d needs at least |d| flips


class Split:
    """One simulated split: FP32 correctness, and candidates' correctness drawn on demand."""

    def __init__(self, world: World, n: int, rng: np.random.Generator) -> None:
        self.world, self.n, self.rng = world, n, rng
        self.ref = rng.random(n) < world.p_ref
        self.latent = {c: rng.random(n) for c in (*CALIBRATORS, "fp16")}
        if world.group_size > 0:
            self.groups = np.arange(n) // world.group_size
            k = world.group_shape
            self.factor = np.minimum(rng.gamma(k, 1.0 / k, self.groups[-1] + 1), 8.0)[self.groups]
        else:
            self.groups, self.factor = None, 1.0

    def candidate(self, family: str, fp16_layers: int) -> np.ndarray:
        """Correctness of a candidate of ``family``'s calibrator with that many FP16 layers."""
        w = self.world
        f = w.flip(fp16_layers)
        p_b = (f - w.delta) / 2.0 * self.factor  # a group's flips scale together: its
        p_c = (f + w.delta) / 2.0 * self.factor  # delta is delta * factor, mean delta
        fresh = self.rng.random(self.n)
        u = np.where(self.rng.random(self.n) < w.rho, self.latent[family], fresh)
        return np.where(self.ref, u >= p_b / w.p_ref, u < p_c / (1.0 - w.p_ref))


def _proxy_ranking(world: World, rng: np.random.Generator) -> list[str]:
    names = [f"MatMul_{i}" for i in range(world.layers)]
    return rank({n: float(s) for n, s in zip(names, rng.exponential(1.0, world.layers))},
                order=names)


def new_protocol(world: World, n_dev: int, n_test: int, margin: Margin,
                 rng: np.random.Generator, *, max_full_evals: int = 14) -> dict:
    """Choices on dev, one declared family tested once on a fresh test split."""
    dev = Split(world, n_dev, rng)
    seeds = iter(rng.integers(0, 2**32, size=64))
    cal_tests = {c: paired_signoff(dev.ref, dev.candidate(c, 0), margin=margin,
                                   groups=dev.groups, seed=int(next(seeds)), candidate=c)
                 for c in CALIBRATORS}
    best = max(CALIBRATORS, key=lambda c: cal_tests[c].cand_value)  # by dev accuracy
    ranking = _proxy_ranking(world, rng)
    searched: dict[frozenset, object] = {}

    def full_eval(fp16: frozenset) -> EvalResult:
        t = cal_tests[best] if not fp16 else paired_signoff(
            dev.ref, dev.candidate(best, len(fp16)), margin=margin, groups=dev.groups,
            seed=int(next(seeds)), candidate="mixed")
        searched[fp16] = t
        return EvalResult(t.status, t.point, (t.low, t.high))

    result = search_fp16_set(ranking, full_eval, max_full_evals=max_full_evals)
    dev_tests = {"fp16": paired_signoff(dev.ref, dev.candidate("fp16", world.layers),
                                        margin=margin, groups=dev.groups,
                                        seed=int(next(seeds)), candidate="fp16"),
                 best: cal_tests[best]}
    mixed_layers = len(result.fp16_nodes)
    if result.status == PASS and 0 < mixed_layers:
        dev_tests["mixed"] = searched[result.fp16_set]
    family = declare_family(dev_tests, method="fixed_sequence", alpha=0.025)
    plan = plan_family(family, dev_tests, n_test=n_test)

    test = Split(world, n_test, rng)  # fresh: nothing above saw it
    ledger = TestLedger(family)
    layers = {"fp16": world.layers, best: 0, "mixed": mixed_layers}
    tests = {}
    for c in family.candidates:
        ledger.record(c, n=n_test)
        kind = "fp16" if c == "fp16" else best
        tests[c] = paired_signoff(test.ref, test.candidate(kind, layers[c]), margin=margin,
                                  groups=test.groups, seed=int(next(seeds)), candidate=c)
    decision = decide_family(family, tests, ledger=ledger)
    rec = recommend_candidate(decision, int8_nodes={c: world.layers - layers[c]
                                                    for c in family.candidates})
    plan_best = next(r for r in plan.rows if r["candidate"] == best)
    return {"recommended": rec.candidate, "int8_pass": decision.status(best) == PASS,
            "plan_adequate": plan_best["adequate"], "plan_n": plan_best["n_required"]}


@dataclass(frozen=True)
class OldVerdict:
    status: str
    point: float
    low: float
    high: float
    cand_value: float


def old_verdict(correct_ref: np.ndarray, correct_cand: np.ndarray, *, margin: Margin,
                alpha: float = 0.05, n_boot: int = 2000, seed: int = 0) -> OldVerdict:
    """The single-split verdict before issue 15: the two-sided (1 - alpha) percentile
    interval of the paired-bootstrap accuracy delta; PASS if low > -m, FAIL if high < -m."""
    point, deltas = accuracy_deltas(correct_ref, correct_cand, n_boot=n_boot,
                                    rng=np.random.default_rng(seed))
    low, high = (float(v) for v in np.quantile(deltas, [alpha / 2.0, 1.0 - alpha / 2.0]))
    m = margin_abs(margin, float(np.mean(correct_ref)))
    status = PASS if low > -m else FAIL if high < -m else INCONCLUSIVE
    return OldVerdict(status, float(point), low, high, float(np.mean(correct_cand)))


def old_protocol(world: World, n: int, margin: Margin, rng: np.random.Generator, *,
                 max_full_evals: int = 14) -> dict:
    """Every choice and the sign-off on one split, old verdict and old recommendation."""
    split = Split(world, n, rng)
    seeds = iter(rng.integers(0, 2**32, size=64))

    def verdict(correct: np.ndarray):
        return old_verdict(split.ref, correct, margin=margin, alpha=0.05,
                           seed=int(next(seeds)))

    cal = {c: verdict(split.candidate(c, 0)) for c in CALIBRATORS}
    best = max(CALIBRATORS, key=lambda c: cal[c].cand_value)
    ranking = _proxy_ranking(world, rng)

    def full_eval(fp16: frozenset) -> EvalResult:
        d = cal[best] if not fp16 else verdict(split.candidate(best, len(fp16)))
        return EvalResult(d.status, d.point, (d.low, d.high))

    result = search_fp16_set(ranking, full_eval, max_full_evals=max_full_evals)
    statuses = {c: (cal[c].status, world.layers) for c in CALIBRATORS}
    statuses["fp16"] = (verdict(split.candidate("fp16", world.layers)).status, 0)
    statuses["mixed"] = (result.status, world.layers - len(result.fp16_nodes))
    passing = [(int8, c != "mixed", c) for c, (s, int8) in statuses.items() if s == PASS]
    return {"recommended": max(passing)[-1] if passing else None,
            "int8_pass": cal[best].status == PASS}


def _rate(hits: int, sims: int) -> tuple[float, float]:
    p = hits / sims
    return p, math.sqrt(max(p * (1 - p), 1e-12) / sims)


def run(n_test: int, sims: int, n_dev: int, margin: Margin, seed: int, *,
        group_size: int = 0, group_shape: float = 1.0) -> dict:
    out = {}
    null = -margin.value * 0.77 if margin.kind == "relative" else -margin.value
    for world in (World("null", null, group_size=group_size, group_shape=group_shape),
                  World("lossless", 0.0, group_size=group_size, group_shape=group_shape)):
        rng = np.random.default_rng([seed, n_test, 0 if world.name == "null" else 1])
        new = [new_protocol(world, n_dev, n_test, margin, rng) for _ in range(sims)]
        old = [old_protocol(world, n_test, margin, rng) for _ in range(sims)]
        out[world.name] = {
            "new_recommended": _rate(sum(r["recommended"] is not None for r in new), sims),
            "new_int8_pass": _rate(sum(r["int8_pass"] for r in new), sims),
            "new_plan_adequate": sum(bool(r["plan_adequate"]) for r in new) / sims,
            "new_plan_n": float(np.median([r["plan_n"] if r["plan_n"] is not None else np.inf
                                           for r in new])),
            "old_recommended": _rate(sum(r["recommended"] is not None for r in old), sims),
            "old_int8_pass": _rate(sum(r["int8_pass"] for r in old), sims),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-test", type=int, default=6000, help="bert_int8 default test size")
    ap.add_argument("--n-dev", type=int, default=2500, help="dev split size")
    ap.add_argument("--sims", type=int, default=1500, help="simulations at --n-test")
    ap.add_argument("--sims-other", type=int, default=500,
                    help="simulations at the other test sizes")
    ap.add_argument("--sizes", type=int, nargs="*", default=[2500, 5000, 10000])
    ap.add_argument("--margin", type=float, default=0.01, help="relative margin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--group-size", type=int, default=0,
                    help="> 0: grouped examples (e.g. reviews per movie); the new protocol "
                         "uses the cluster bootstrap, the old one treats examples as iid")
    ap.add_argument("--group-shape", type=float, default=1.0,
                    help="Gamma shape of the per-group flip-rate factor (smaller: more ICC)")
    args = ap.parse_args(argv)
    margin = Margin("relative", args.margin)
    t0 = time.perf_counter()
    print(f"simulated sign-off, FP32 accuracy 0.77, margin {margin.describe(0.77, 'accuracy')}, "
          f"dev n={args.n_dev}, flip rates INT8 0.05 / FP16 0.005, 48 layers, search budget 14"
          + (f", groups of {args.group_size} (flip-rate factor Gamma shape {args.group_shape:g})"
             if args.group_size else ", independent examples"))
    print("columns: false PASS = P(some candidate recommended | every candidate loses exactly "
          "the margin); power = P(best INT8 PASSes | every candidate lossless), for OLD on "
          "the same split it was chosen on; plan = median test size for 80% power planned on "
          "dev for that INT8, and the share of runs whose test split was large enough")
    print(f"{'n_test':>7} {'sims':>5}  {'false PASS new':>14} {'false PASS old':>14}  "
          f"{'power new':>14} {'power old':>14}  {'plan n80 / ok':>13}")
    last = None
    for n in [*args.sizes, args.n_test]:
        sims = args.sims if n == args.n_test else args.sims_other
        r = run(n, sims, args.n_dev, margin, args.seed, group_size=args.group_size,
                group_shape=args.group_shape)
        nf, nfs = r["null"]["new_recommended"]
        of, ofs = r["null"]["old_recommended"]
        npw, npws = r["lossless"]["new_int8_pass"]
        opw, opws = r["lossless"]["old_int8_pass"]
        print(f"{n:>7} {sims:>5}  {nf:.4f}±{nfs:.4f}  {of:.4f}±{ofs:.4f}  "
              f"{npw:.4f}±{npws:.4f}  {opw:.4f}±{opws:.4f}  "
              f"{r['lossless']['new_plan_n']:>6.0f} / {r['lossless']['new_plan_adequate']:.2f}"
              f"  (any recommendation, lossless: new "
              f"{r['lossless']['new_recommended'][0]:.3f}, old "
              f"{r['lossless']['old_recommended'][0]:.3f})")
        if n == args.n_test:
            last = (nf, nfs, npw, sims)
    nf, nfs, npw, sims = last
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / sims)
    print(f"acceptance: false_pass_recommended {nf:.4f} <= 0.025 + 3 MC SE = {bound:.4f}: "
          f"{'OK' if nf <= bound else 'VIOLATED'}  ({time.perf_counter() - t0:.0f} s)")
    print(f"false_pass_recommended={nf:.4f} power_lossless={npw:.4f} n_test={args.n_test}")
    return 0 if nf <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
