"""Does a relative 1e-6 change of the train embeddings change the prepared head's bytes?

The zoo models' heads are fitted on embeddings that ONNX Runtime computes with CPU-specific
kernels (AVX2 / AVX512-VNNI / AMX), which differ in their last float bits. This benchmark
fits heads on seeded inputs of the real sizes and shapes, perturbs every embedding entry by
a relative +-1e-6 (random sign: the size of the differences between CPU kernels), refits,
and counts how often the head's bytes change. Rows:

* ``lbfgs_float32``: the old recipe (scikit-learn lbfgs, the model's max_iter, weights
  cast to float32);
* ``newton_grid``: :func:`quantkit.models.head.fit_linear_head` (Newton-CG to the optimum,
  weights on the fixed grid) - what quantkit does;
* ``newton_grid_rounded_x``: the same after rounding the embeddings to a float32 grid of 14
  mantissa bits (~6e-5 relative) first, which the module docstring argues against.

Also printed: how far the optimum moves (max and sum of |dw| in units of the largest
weight, unrounded) and what the grid costs (RMS change of the logits and the share of
changed train predictions, rounded vs unrounded head).

Shapes: ``minilm``: 3,000 x 384 L2-normalized, 2 classes (minilm_sentiment's train split);
``mobilenet``: 20,000 x 1,280 non-negative, 10 classes (mobilenet_fashion's n_train).
The inputs are synthetic (a seeded latent-class model), not the real embeddings.

    python benchmarks/head_bytes.py [--shape minilm|mobilenet|all] [--reps 20] [--jobs 1]

Last line: ``head_bytes_changed <shape>=<k>/<reps> ...`` for the ``newton_grid`` rows.
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

from quantkit.models.head import fit_linear_head  # noqa: E402

SHAPES = {"minilm": dict(n=3000, d=384, k=2, max_iter=2000),
          "mobilenet": dict(n=20000, d=1280, k=10, max_iter=1000)}


def inputs(shape: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    sh = SHAPES[shape]
    rng = np.random.default_rng(seed)
    n, d, k = sh["n"], sh["d"], sh["k"]
    y = rng.integers(0, k, n)
    z = rng.normal(size=(n, 48)) + rng.normal(size=(k, 48))[y] * 0.6
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


def lbfgs_bytes(x, y, k, max_iter) -> bytes:
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    h = LogisticRegression(C=1.0, max_iter=max_iter)
    with threadpool_limits(1, "blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h.fit(x, y)
    return h.coef_.astype(np.float32).tobytes() + h.intercept_.astype(np.float32).tobytes()


def head_bytes(head) -> bytes:
    return head.coef.tobytes() + head.intercept.tobytes()


def one(args) -> dict:
    shape, rep, rows = args
    sh = SHAPES[shape]
    x, y = inputs(shape, 0)
    xp = perturb(x, 1000 + rep)
    out = {}
    if "lbfgs_float32" in rows:
        out["lbfgs_float32"] = (lbfgs_bytes(x, y, sh["k"], sh["max_iter"])
                                != lbfgs_bytes(xp, y, sh["k"], sh["max_iter"]))
    if "newton_grid" in rows:
        a = fit_linear_head(x, y, n_labels=sh["k"])
        b = fit_linear_head(xp, y, n_labels=sh["k"])
        out["newton_grid"] = head_bytes(a) != head_bytes(b)
        # the unrounded optimum's move and the grid's cost (bits=24: float32 as is)
        a0 = fit_linear_head(x, y, n_labels=sh["k"], bits=24)
        b0 = fit_linear_head(xp, y, n_labels=sh["k"], bits=24)
        top = float(np.abs(a0.coef).max())
        dw = np.abs(a0.coef.astype(np.float64) - b0.coef) / top
        out["dw_max"], out["dw_sum"] = float(dw.max()), float(dw.sum())
        la, l0 = a.logits(x), a0.logits(x)
        out["logit_rms"] = float(np.sqrt(np.mean((la - l0) ** 2)))
        out["pred_changed"] = float(np.mean(la.argmax(1) != l0.argmax(1)))
        out["iterations"] = a.iterations
    if "newton_grid_rounded_x" in rows:
        a = fit_linear_head(round_mantissa(x), y, n_labels=sh["k"])
        b = fit_linear_head(round_mantissa(xp), y, n_labels=sh["k"])
        out["newton_grid_rounded_x"] = head_bytes(a) != head_bytes(b)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="all", choices=["all", *SHAPES])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rows", default="lbfgs_float32,newton_grid,newton_grid_rounded_x")
    a = ap.parse_args()
    rows = tuple(a.rows.split(","))
    shapes = list(SHAPES) if a.shape == "all" else [a.shape]
    summary = []
    for shape in shapes:
        t0 = time.perf_counter()
        tasks = [(shape, r, rows) for r in range(a.reps)]
        if a.jobs > 1:
            with ProcessPoolExecutor(a.jobs) as pool:
                res = list(pool.map(one, tasks))
        else:
            res = [one(t) for t in tasks]
        print(f"{shape}: {SHAPES[shape]}, {a.reps} perturbations of relative 1e-6 "
              f"({time.perf_counter() - t0:.0f} s)")
        for row in rows:
            k = sum(r[row] for r in res)
            print(f"  {row:<24} bytes changed {k}/{a.reps}")
        if "newton_grid" in rows:
            for key in ("dw_max", "dw_sum", "logit_rms", "pred_changed", "iterations"):
                v = np.array([r[key] for r in res], dtype=float)
                print(f"  {key:<24} median {np.median(v):.3g}  max {v.max():.3g}")
            summary.append(f"{shape}={sum(r['newton_grid'] for r in res)}/{a.reps}")
    print("head_bytes_changed " + " ".join(summary))


if __name__ == "__main__":
    main()
