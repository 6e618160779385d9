"""Is the mAP sign-off valid? Simulate candidates exactly at the margin through quantkit's own
``map_signoff``.

A population of ``--population`` images with labelled objects (4 classes, sizes from small to
large, some images empty) and FP32-like detections: each object found with probability 0.85,
its box jittered by ~5% of its size, a score that falls with the jitter, plus low-scoring false
positives. The candidate is FP32's detections degraded by strength ``s`` (more box jitter and
score noise from fixed draws, so mAP falls continuously with ``s``); ``s`` is found by
bisection so that the candidate's *population* mAP@[.5:.95] is exactly 99% of FP32's (the
relative 1% margin), to 1e-4. The matching is pycocotools' (one ``COCOeval`` per model over the
population); each simulated test split draws ``--n`` images with replacement, takes both
models' match tables of those images (``MatchTable.subset``) and calls
``quantkit.verdict.map_bootstrap.map_signoff`` (one-sided alpha 0.025, the paired percentile
bootstrap with ``--n-boot`` resamples). A PASS is a false PASS; valid means false PASS
<= 0.025 + 2 SE. The same splits with a near-lossless candidate (strength ``s / 4``) give the
power (on the first ``--power-sims`` splits).

Last line: ``false_pass=<x> se=<s> n_images=<n> sims=<k>``.

    python benchmarks/detection_validity.py [--sims 1000] [--n 1000] [--n-boot 2000] [--workers 2]
    python benchmarks/detection_validity.py --smoke   # a tiny run (seconds)

The results file (``benchmarks/results/detection_validity.md``, or ``--results-dir``) is
written by ``benchmarks/_common.py: run_benchmark``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
from quantkit.tasks.detection.boxes import Detections  # noqa: E402
from quantkit.tasks.detection.coco import evaluate  # noqa: E402
from quantkit.tasks.detection.labels import labels_from_arrays  # noqa: E402
from quantkit.verdict import Margin, TestPolicy  # noqa: E402
from quantkit.verdict.map_bootstrap import MapRecombiner, map_signoff  # noqa: E402

MARGIN = Margin("relative", 0.01)
N_CLASSES = 4
W, H = 640, 480


def population(n_images: int, seed: int):
    """(labels, FP32 detections, the fixed noise draws of each detection)."""
    rng = np.random.default_rng(seed)
    boxes, classes, dets, noise = [], [], [], []
    for i in range(n_images):
        n = int(rng.poisson(4)) if rng.random() > 0.1 else 0
        wh = np.exp(rng.uniform(np.log(16), np.log(300), size=(n, 2)))
        xy = rng.uniform(0, 1, size=(n, 2)) * (np.array([W, H]) - wh)
        b = np.concatenate([xy, xy + wh], axis=1)
        c = rng.integers(0, N_CLASSES, n)
        boxes.append(b)
        classes.append(c)
        found = rng.random(n) > 0.15
        m = int(found.sum())
        jit = rng.normal(0, 0.05, (m, 4))
        db = b[found] + jit * np.repeat(wh[found], 2, axis=1)
        quality = np.abs(jit).mean(axis=1)
        ds = 1 / (1 + np.exp(-(2.5 - 40 * quality + rng.normal(0, 1.0, m))))
        dc = np.where(rng.random(m) < 0.93, c[found], rng.integers(0, N_CLASSES, m))
        nf = int(rng.poisson(1.5))
        fwh = np.exp(rng.uniform(np.log(16), np.log(200), size=(nf, 2)))
        fxy = rng.uniform(0, 1, size=(nf, 2)) * (np.array([W, H]) - fwh)
        fb = np.concatenate([fxy, fxy + fwh], axis=1)
        all_b = np.concatenate([db, fb])
        sizes = np.concatenate([np.repeat(wh[found], 2, axis=1), np.repeat(fwh, 2, axis=1)])
        dets.append(Detections(np.clip(all_b, 0, [W, H, W, H]),
                               np.concatenate([ds, rng.beta(1.5, 6, nf)]),
                               np.concatenate([dc, rng.integers(0, N_CLASSES, nf)])))
        noise.append((rng.normal(0, 1, (m + nf, 4)) * sizes, rng.normal(0, 1, m + nf)))
    labels = labels_from_arrays([f"im{i}" for i in range(n_images)], [H] * n_images,
                                [W] * n_images, boxes, classes,
                                [f"c{k}" for k in range(N_CLASSES)])
    return labels, dets, noise


def degrade(dets, noise, s: float):
    out = []
    for d, (zb, zs) in zip(dets, noise):
        b = np.clip(d.boxes + s * 0.05 * zb, 0, [W, H, W, H])
        b[:, 2:] = np.maximum(b[:, 2:], b[:, :2] + 0.5)
        sc = np.clip(d.scores + s * 0.15 * zs, 1e-4, 1.0)
        out.append(Detections(b, sc, d.classes))
    return out


def at_margin(labels, dets, noise, tol: float = 1e-4):
    """(s, candidate table, FP32 mAP, candidate mAP) with population mAP ratio 0.99."""
    ref = evaluate(labels, dets)
    target = 1.0 - MARGIN.value
    lo, hi = 0.0, 0.05
    while True:
        cand = evaluate(labels, degrade(dets, noise, hi))
        if cand.map / ref.map < target:
            break
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        cand = evaluate(labels, degrade(dets, noise, mid))
        ratio = cand.map / ref.map
        if abs(ratio - target) <= tol:
            return mid, ref, cand
        lo, hi = (mid, hi) if ratio > target else (lo, mid)
    return mid, ref, cand


_STATE: dict = {}


def _init(ref_table, cand_table, near_table, n, n_boot):
    _STATE.update(ref=ref_table, cand=cand_table, near=near_table, n=n, n_boot=n_boot)


def _one(job: tuple[np.random.SeedSequence, bool]) -> tuple[tuple[str, bool, bool], str]:
    """(status of the candidate at the margin, status of the near-lossless candidate or "-")
    on one simulated test split (the same images and bootstrap seed for both)."""
    seed_seq, with_power = job
    rng = np.random.default_rng(seed_seq)
    idx = rng.integers(0, _STATE["ref"].n_images, _STATE["n"])
    ref = MapRecombiner(_STATE["ref"].subset(idx))
    policy = TestPolicy(n_boot=_STATE["n_boot"], seed=int(rng.integers(2**31)))
    t = map_signoff(ref, MapRecombiner(_STATE["cand"].subset(idx)), margin=MARGIN,
                    policy=policy)
    at = (t.status, t.methods["percentile"]["low"] > t.threshold,
          t.methods["basic"]["low"] > t.threshold)
    near = map_signoff(ref, MapRecombiner(_STATE["near"].subset(idx)), margin=MARGIN,
                       policy=policy).status if with_power else "-"
    return at, near


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--n", type=int, default=1000, help="images per simulated test split")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--population", type=int, default=8000)
    ap.add_argument("--power-sims", type=int, default=200,
                    help="of the sims, how many also test the near-lossless candidate")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    _common.bench_args(ap, "12 sims of 150 images")
    a = ap.parse_args(argv)
    if a.smoke:
        a.sims, a.n, a.n_boot, a.population, a.workers, a.power_sims = 12, 150, 200, 500, 1, 6
    t0 = time.perf_counter()
    labels, dets, noise = population(a.population, a.seed)
    s, ref, cand = at_margin(labels, dets, noise)
    near = evaluate(labels, degrade(dets, noise, s / 4))  # a small loss: the power
    t1 = time.perf_counter()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    print(f"host: {cpu}, {os.cpu_count()} cores, {platform.machine()}")
    print(f"population {a.population} images, {labels.n_boxes} objects, "
          f"{ref.n_detections} FP32 detections; FP32 mAP@[.5:.95] {ref.map:.4f} "
          f"(mAP@.5 {ref.map50:.4f}); candidate at s={s:.5f}: {cand.map:.4f}, ratio "
          f"{cand.map / ref.map:.5f} (margin: 0.99); near-lossless candidate at s/4: "
          f"ratio {near.map / ref.map:.5f} ({t1 - t0:.0f} s)")
    seeds = [(q, i < a.power_sims) for i, q in
             enumerate(np.random.SeedSequence([a.seed, 7]).spawn(a.sims))]
    if a.workers > 1:
        ctx = mp.get_context("fork")
        out = []
        with ctx.Pool(a.workers, initializer=_init,
                      initargs=(ref.table, cand.table, near.table, a.n, a.n_boot)) as pool:
            for o in pool.imap(_one, seeds, chunksize=4):
                out.append(o)
                if len(out) % 100 == 0:
                    print(f"  {len(out)} sims: false PASS so far "
                          f"{sum(x[0][0] == 'PASS' for x in out) / len(out):.4f} "
                          f"({time.perf_counter() - t1:.0f} s)", flush=True)
    else:
        _init(ref.table, cand.table, near.table, a.n, a.n_boot)
        out = [_one(q) for q in seeds]
    t2 = time.perf_counter()
    k = a.sims
    fp = sum(o[0][0] == "PASS" for o in out) / k
    fp_pct = sum(o[0][1] for o in out) / k
    fp_basic = sum(o[0][2] for o in out) / k
    se = math.sqrt(max(fp * (1 - fp), 1e-12) / k)
    n_power = sum(o[1] != "-" for o in out)
    power = sum(o[1] == "PASS" for o in out) / max(n_power, 1)
    fails = sum(o[0][0] == "FAIL" for o in out) / k
    print(f"map_signoff at the margin: false PASS {fp:.4f} ± {se:.4f} (bound 0.025 + 2 SE = "
          f"{0.025 + 2 * se:.4f}: {'ok' if fp <= 0.025 + 2 * se else 'EXCEEDED'}), FAIL "
          f"{fails:.3f}; near-lossless candidate (power): PASS {power:.3f} of {n_power}; n_boot "
          f"{a.n_boot}; {k} sims in {t2 - t1:.0f} s ({a.workers} workers; "
          f"{(t2 - t1) * a.workers / (k + n_power):.2f} s per test per worker)")
    print(f"each interval alone at the margin: percentile would PASS {fp_pct:.4f}, basic "
          f"{fp_basic:.4f} (the decision is their envelope)")
    print(f"false_pass={fp:.4f} se={se:.4f} n_images={a.n} sims={k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_common.run_benchmark("detection_validity", main))
