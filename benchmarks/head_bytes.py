"""Does a relative 1e-6 change of the train embeddings change the prepared head's bytes?

The zoo models' heads are fitted on embeddings that ONNX Runtime computes with CPU-specific
kernels (AVX2 / AVX512-VNNI / AMX), which differ in their last float bits. This benchmark
fits heads on seeded inputs of the real sizes and shapes, perturbs every embedding entry by
a relative +-1e-6 (random sign: the size of the differences between CPU kernels), refits,
and counts how often the head's bytes change:

* ``lbfgs_float32``: the old recipe (scikit-learn lbfgs at the model's max_iter, weights
  cast to float32);
* ``grid<b>``: :func:`quantkit.models.head.solve_logistic_head` (Newton-CG to the optimum)
  on the fixed grid of ``b`` bits (:func:`~quantkit.models.head.head_on_grid`); quantkit
  uses ``GRID_BITS``;
* ``grid<b>_rounded_x``: the same after rounding the embeddings to 14 mantissa bits
  (~6e-5 relative) first, which the module docstring of models/head.py argues against.

Also printed: how far the optimum moves (max and sum of |dw| in units of the largest
weight) and what the default grid costs (RMS change of the train logits, share of changed
train predictions, rounded vs unrounded). Shapes: ``minilm``: 3,000 x 384 L2-normalized,
2 classes (minilm_sentiment's train split); ``mobilenet``: 20,000 x 1,280 non-negative,
10 classes (mobilenet_fashion's n_train). The inputs are synthetic (a seeded latent-class
model), not the real embeddings.

    python benchmarks/head_bytes.py [--shape minilm|mobilenet|all] [--reps 20] [--jobs 1]
        [--rows lbfgs_float32,grid,grid_rounded_x]
    python benchmarks/head_bytes.py --smoke     # the minilm shape, 2 perturbations

Last line: ``head_bytes_changed <shape>=<k>/<reps> ...`` at ``GRID_BITS``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

from quantkit.models.head import GRID_BITS, head_on_grid, solve_logistic_head  # noqa: E402

SHAPES = {"minilm": dict(n=3000, d=384, k=2, max_iter=2000, signal=0.15),
          "mobilenet": dict(n=20000, d=1280, k=10, max_iter=1000, signal=0.4)}
BITS = (6, 8, 10, 12)


def inputs(shape: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    sh = SHAPES[shape]
    rng = np.random.default_rng(seed)
    n, d, k = sh["n"], sh["d"], sh["k"]
    y = rng.integers(0, k, n)
    z = rng.normal(size=(n, 48)) + rng.normal(size=(k, 48))[y] * sh["signal"]
    x = z @ rng.normal(size=(48, d)) * 0.3 + rng.normal(size=(n, d)) * 0.5
    if shape == "minilm":
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:
        x = np.maximum(x, 0.0)
    return x.astype(np.float32), y


def perturb(x: np.ndarray, seed: int, rel: float = 1e-6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (x.astype(np.float64) * (1 + rel * rng.choice([-1.0, 1.0], size=x.shape))
            ).astype(np.float32)


def round_mantissa(x: np.ndarray, bits: int = 14) -> np.ndarray:
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(m * 2.0 ** bits) / 2.0 ** bits, e).astype(np.float32)


def lbfgs_bytes(x, y, max_iter) -> bytes:
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    h = LogisticRegression(C=1.0, max_iter=max_iter)
    with threadpool_limits(1, "blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h.fit(x, y)
    return h.coef_.astype(np.float32).tobytes() + h.intercept_.astype(np.float32).tobytes()


def solve(x, y, shape):
    sh = SHAPES[shape]
    return solve_logistic_head(x, y, n_labels=sh["k"], max_iter=sh["max_iter"])


def grid_bytes(x, y, solved, bits) -> bytes:
    h = head_on_grid(x, y, *solved, bits=bits)
    return h.coef.tobytes() + h.intercept.tobytes()


def base(shape: str, rows) -> dict:
    x, y = inputs(shape, 0)
    out = {"solved": solve(x, y, shape)}
    if "grid_rounded_x" in rows:
        out["solved_rx"] = solve(round_mantissa(x), y, shape)
    if "lbfgs_float32" in rows:
        out["lbfgs"] = lbfgs_bytes(x, y, SHAPES[shape]["max_iter"])
    return out


def one(args) -> dict:
    shape, rep, rows, b = args
    x, y = inputs(shape, 0)
    xp = perturb(x, 1000 + rep)
    out = {}
    if "lbfgs_float32" in rows:
        out["lbfgs_float32"] = b["lbfgs"] != lbfgs_bytes(xp, y, SHAPES[shape]["max_iter"])
    if "grid" in rows:
        p = solve(xp, y, shape)
        for bits in BITS:
            out[f"grid{bits}"] = grid_bytes(x, y, b["solved"], bits) != grid_bytes(xp, y, p, bits)
        coef0, coef1 = b["solved"][0], p[0]
        dw = np.abs(coef0 - coef1) / np.abs(coef0).max()
        out["dw_max"], out["dw_sum"] = float(dw.max()), float(dw.sum())
        out["iterations"] = p[2]
    if "grid_rounded_x" in rows:
        p = solve(round_mantissa(xp), y, shape)
        for bits in BITS:
            out[f"grid{bits}_rounded_x"] = (grid_bytes(x, y, b["solved_rx"], bits)
                                            != grid_bytes(xp, y, p, bits))
    return out


def cost(shape: str, solved) -> dict:
    """What the default grid costs on the train inputs: logits and predictions."""
    x, y = inputs(shape, 0)
    coef, intercept, _ = solved
    exact = x.astype(np.float64) @ coef.T + np.nan_to_num(intercept, nan=-1e4)
    h = head_on_grid(x, y, *solved, bits=GRID_BITS)
    grid = h.logits(x)
    return {"logit_rms": float(np.sqrt(np.mean((grid - exact) ** 2))),
            "logit_scale": float(np.sqrt(np.mean(exact ** 2))),
            "pred_changed": float(np.mean(grid.argmax(1) != exact.argmax(1))),
            "train_accuracy": h.train_accuracy}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="all", choices=["all", *SHAPES])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rows", default="lbfgs_float32,grid,grid_rounded_x")
    _common.bench_args(ap, "the minilm shape only, 2 perturbations, every row")
    a = ap.parse_args()
    if a.smoke:
        a.shape, a.reps = "minilm", 2
    rows = tuple(a.rows.split(","))
    shapes = list(SHAPES) if a.shape == "all" else [a.shape]
    summary = []
    for shape in shapes:
        t0 = time.perf_counter()
        b = base(shape, rows)
        tasks = [(shape, r, rows, b) for r in range(a.reps)]
        if a.jobs > 1:
            with ProcessPoolExecutor(a.jobs) as pool:
                res = list(pool.map(one, tasks))
        else:
            res = [one(t) for t in tasks]
        print(f"{shape}: {SHAPES[shape]}, {a.reps} perturbations of relative 1e-6 "
              f"({time.perf_counter() - t0:.0f} s, CPU shared)")
        for key in res[0]:
            if key in ("dw_max", "dw_sum", "iterations"):
                continue
            print(f"  {key:<24} bytes changed {sum(r[key] for r in res)}/{a.reps}")
        if "grid" in rows:
            for key in ("dw_max", "dw_sum", "iterations"):
                v = np.array([r[key] for r in res], dtype=float)
                print(f"  {key:<24} median {np.median(v):.3g}  max {v.max():.3g}")
            for key, val in cost(shape, b["solved"]).items():
                print(f"  grid{GRID_BITS} {key:<18} {val:.4g}")
            summary.append(f"{shape}={sum(r[f'grid{GRID_BITS}'] for r in res)}/{a.reps}")
    print("head_bytes_changed " + " ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("head_bytes", main))
