"""The linear head of a zoo model, fitted so that its bytes do not depend on the host CPU.

The prepared zoo models (``minilm_sentiment``, ``model=hub``, ``mobilenet_fashion``) are a
backbone exported from pinned weights plus a logistic-regression head fitted on the
backbone's train embeddings. The embeddings come from ONNX Runtime, whose kernels differ by
CPU (AVX2, AVX512-VNNI, AMX) in their last float bits (relative ~1e-6). Two things made the
head's bytes, and so the prepared model's sha256, follow those bits:

1. **The solver stopped on the path, not at the optimum.** lbfgs stops on a function-decrease
   tolerance or a budget (``mobilenet_fashion`` stopped at 1000 iterations); two runs whose
   inputs differ by 1e-6 take other line-search steps and stop elsewhere: on a 5,000 x 1,280,
   10-class problem the weights differed by up to 1.2% of the largest weight. Here the head
   is the *optimum* of the same objective (L2-regularized multinomial / binary logistic
   regression, scikit-learn's ``C``), found by Newton-CG (Nocedal & Wright 2006, ch. 7) to a
   gradient tolerance of :data:`SOLVER_TOL`: a smooth function of its inputs.
2. **The weights were written in full float32.** The optimum still moves with its inputs
   (measured: a relative 1e-6 perturbation of every embedding moves the weights by up to
   ~5e-7 of the largest weight). :func:`round_to_grid` puts every weight on a fixed-point
   grid of ``2 ** (e - GRID_BITS)`` (``2 ** e``: the smallest power of two >= the tensor's
   largest magnitude), so such a move changes the bytes only when a weight sits within it
   of a grid boundary.

The embeddings themselves are *not* rounded before the fit: with independent perturbations
of relative size d, rounding to a grid of s flips a fraction d / s of the entries by s, which
moves the optimum by sqrt(s / d) times more than the perturbation itself (measured in
``benchmarks/head_bytes.py``).

:data:`GRID_BITS` is chosen so that relative 1e-6 perturbations of the real train
embeddings leave the head's bytes unchanged while the rounding itself changes almost no
train prediction; the old recipe (lbfgs, float32) changed the bytes every time (measured:
benchmarks/results/head_bytes.md). ``benchmarks/head_bytes.py`` repeats this on seeded
synthetic inputs of both zoo shapes (MiniLM 3,000 x 384, 2 classes; MobileNetV2
20,000 x 1,280, 10 classes), with and without rounding the embeddings first.

BLAS runs on every core: the thread count changes only the summation order of the solver's
products (relative ~1e-16, ten orders below the CPU differences the grid absorbs; the head
stays byte-identical: measured in benchmarks/results/head_bytes.md).

Pure numerics (numpy, scikit-learn's solver); no I/O.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

from quantkit.errors import ModelError

__all__ = ["LinearHead", "fit_linear_head", "solve_logistic_head", "head_on_grid",
           "round_to_grid", "GRID_BITS", "SOLVER_TOL", "ABSENT_CLASS_BIAS"]

log = logging.getLogger(__name__)

#: fixed-point bits below the power of two that bounds each weight tensor (step = 2^(e - 8)):
#: 0 of 120 byte changes on the real MiniLM embeddings, 16 of 120 at 10 bits (docstring)
GRID_BITS = 8
#: Newton-CG stops when the largest gradient entry is below this (scikit-learn's ``tol``)
SOLVER_TOL = 1e-10
#: the logit bias of a class absent from the training labels (it never wins)
ABSENT_CLASS_BIAS = -1.0e4


@dataclass(frozen=True)
class LinearHead:
    """``logits = x @ coef.T + intercept``: float32 weights on the grid, one row per label."""

    coef: np.ndarray  # float32 [n_labels, dim]
    intercept: np.ndarray  # float32 [n_labels]
    train_accuracy: float  # of the rounded head on the embeddings it was fitted on
    iterations: int  # Newton iterations
    grid_steps: tuple[float, float]  # (coef step, intercept step)

    def logits(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.float64) @ self.coef.T.astype(np.float64) + self.intercept

    def to_meta(self) -> dict:
        """What ``meta.json`` records about the fit."""
        return {"train_accuracy": self.train_accuracy, "head_iterations": self.iterations,
                "head_grid": {"bits": GRID_BITS, "coef_step": self.grid_steps[0],
                              "intercept_step": self.grid_steps[1]},
                "head_solver": f"newton-cg, tol {SOLVER_TOL:g}"}


def round_to_grid(w: np.ndarray, bits: int = GRID_BITS) -> tuple[np.ndarray, float]:
    """``w`` rounded to multiples of ``2 ** (e - bits)`` (``2 ** e``: the smallest power of
    two >= max |w|), as float32, and that step. Exact in float32 for ``bits`` <= 24; ties
    round to even (numpy); an all-zero tensor stays zero (step 0.0)."""
    a = np.asarray(w, dtype=np.float64)
    top = float(np.max(np.abs(a))) if a.size else 0.0
    if top == 0.0 or not np.isfinite(top):
        if not np.isfinite(top):
            raise ModelError("the fitted head has non-finite weights", where="model.head",
                             value=top, fix="check the train embeddings for NaN / inf")
        return a.astype(np.float32), 0.0
    step = 2.0 ** (int(np.ceil(np.log2(top))) - bits)
    return (np.round(a / step) * step).astype(np.float32), step


def _logit_weights(coef: np.ndarray, intercept: np.ndarray, classes: np.ndarray,
                   n_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """One logit row per label: a binary fit becomes two opposite halves (argmax / softmax
    work as for multiclass); labels absent from the fit get :data:`ABSENT_CLASS_BIAS`."""
    if coef.shape[0] == 1:
        coef = np.vstack([-coef / 2, coef / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    full_c = np.zeros((n_labels, coef.shape[1]))
    full_b = np.full(n_labels, np.nan)
    full_c[classes], full_b[classes] = coef, intercept
    return full_c, full_b


def _standardized(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(z, mean, scale)`` with ``z = (xs - mean) / scale`` per feature; a constant feature
    keeps scale 1 (its z is 0, so its weight is 0 after folding)."""
    mean = xs.mean(axis=0)
    scale = xs.std(axis=0)
    scale[scale < 1e-12] = 1.0
    return (xs - mean) / scale, mean, scale


def solve_logistic_head(x: np.ndarray, y: np.ndarray, *, n_labels: int, C: float = 1.0,
                        max_iter: int = 200,
                        standardize: bool = False) -> tuple[np.ndarray, np.ndarray, int]:
    """The unrounded optimum: float64 logit weights ``(coef [n_labels, dim], intercept
    [n_labels], Newton iterations)`` of the L2-regularized logistic regression (scikit-
    learn's objective at ``C``); absent labels' intercepts are NaN (set by the caller).

    ``standardize``: the objective is posed on the standardized features (mean 0, variance 1
    per feature over ``x``; the penalty on those weights) and the optimum folded back into
    weights on the raw features (``coef / scale``, ``intercept - coef . mean / scale``):
    still a smooth function of the inputs, and far better conditioned where the features'
    scales differ (MobileNetV2's 1,280 pooled ReLU6 channels: Newton-CG to the same
    tolerance in 19 iterations and 2 min instead of 21 min on 20,000 x 1,280, 10 classes)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y)
    if xs.ndim != 2 or len(xs) != len(ys) or len(xs) == 0:
        raise ModelError("the head needs one label per embedding row", where="model.head",
                         value=f"embeddings {xs.shape}, labels {ys.shape}",
                         fix="embed every train example once")
    if not np.all(np.isfinite(xs)):
        raise ModelError("train embeddings contain NaN or inf", where="model.head",
                         value=int(np.count_nonzero(~np.isfinite(xs))),
                         fix="check the backbone export and the train inputs")
    classes = np.unique(ys)
    if len(classes) < 2 or classes.min() < 0 or classes.max() >= n_labels:
        raise ModelError("the head needs at least 2 classes, labelled 0..n_labels-1",
                         where="model.head", value=classes.tolist()[:12],
                         fix="pass label ids in range(len(label_names))")
    head = LogisticRegression(C=C, max_iter=max_iter, solver="newton-cg", tol=SOLVER_TOL)
    z, mean, scale = _standardized(xs) if standardize else (xs, None, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        head.fit(z, ys)
    iterations = int(np.max(head.n_iter_))
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        log.warning("head fit reached max_iter=%d Newton iterations before the gradient was "
                    "below %g: its bytes may depend on the host CPU", max_iter, SOLVER_TOL)
    raw_coef, raw_intercept = head.coef_, head.intercept_
    if standardize:
        raw_coef = raw_coef / scale
        raw_intercept = raw_intercept - raw_coef @ mean
    coef, intercept = _logit_weights(raw_coef, raw_intercept, head.classes_, n_labels)
    return coef, intercept, iterations


def head_on_grid(x: np.ndarray, y: np.ndarray, coef: np.ndarray, intercept: np.ndarray,
                 iterations: int, bits: int = GRID_BITS) -> LinearHead:
    """The solved weights (:func:`solve_logistic_head`) on the fixed grid."""
    coef_q, coef_step = round_to_grid(coef, bits)
    present = ~np.isnan(intercept)
    b_q, b_step = round_to_grid(intercept[present], bits)
    intercept_q = np.full(len(intercept), ABSENT_CLASS_BIAS, dtype=np.float32)
    intercept_q[present] = b_q
    pred = (np.asarray(x, np.float64) @ coef_q.T.astype(np.float64) + intercept_q).argmax(axis=1)
    return LinearHead(coef=coef_q, intercept=intercept_q,
                      train_accuracy=float((pred == np.asarray(y)).mean()), iterations=iterations,
                      grid_steps=(coef_step, b_step))


def fit_linear_head(x: np.ndarray, y: np.ndarray, *, n_labels: int, C: float = 1.0,
                    max_iter: int = 200, bits: int = GRID_BITS,
                    standardize: bool = False) -> LinearHead:
    """The L2-regularized logistic-regression head (scikit-learn's objective at ``C``) of
    embeddings ``x`` [n, dim] and labels ``y`` (0..n_labels-1), solved to its optimum and
    put on the fixed grid (module docstring). ``max_iter``: Newton iterations (a bound that a
    converging fit stays far below; reaching it is logged); ``standardize``: see
    :func:`solve_logistic_head`."""
    coef, intercept, iterations = solve_logistic_head(x, y, n_labels=n_labels, C=C,
                                                      max_iter=max_iter, standardize=standardize)
    return head_on_grid(x, y, coef, intercept, iterations, bits)
