"""The zoo head's bytes do not follow the host CPU (quantkit/models/head.py; issue 24,
point 9): a relative 1e-6 perturbation of every train embedding (the size of the
differences between CPU kernels) leaves the prepared model's bytes, and so its sha256,
unchanged; the old recipe (lbfgs, float32 weights) changed them every time."""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.errors import ModelError
from quantkit.models.torch_export import add_linear_head
from quantkit.models.head import ABSENT_CLASS_BIAS, GRID_BITS, fit_linear_head, round_to_grid


def minilm_like(seed: int = 0, n: int = 3000, d: int = 384, k: int = 2):
    """Inputs of minilm_sentiment's head: 3,000 L2-normalized 384-d embeddings, 2 classes,
    separable to ~80% like the real ones (benchmarks/head_bytes.py)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    z = rng.normal(size=(n, 48)) + rng.normal(size=(k, 48))[y] * 0.15
    x = z @ rng.normal(size=(48, d)) * 0.3 + rng.normal(size=(n, d)) * 0.5
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), y


def perturbed(x: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (x.astype(np.float64) * (1 + 1e-6 * rng.choice([-1.0, 1.0], size=x.shape))
            ).astype(np.float32)


def model_sha(head, dim: int) -> str:
    """sha256 of a prepared model: an embedding graph (here an Identity) + the head."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", dim])
    emb = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["embedding"], name="id")],
                          "backbone", [x], [emb])
    proto = add_linear_head(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                            head.coef, head.intercept)
    onnx.checker.check_model(proto)
    return hashlib.sha256(proto.SerializeToString()).hexdigest()


def test_prepared_model_bytes_survive_cpu_kernel_noise():
    x, y = minilm_like()
    head = fit_linear_head(x, y, n_labels=2)
    sha = model_sha(head, x.shape[1])
    for seed in (1, 2, 3):
        again = fit_linear_head(perturbed(x, seed), y, n_labels=2)
        assert model_sha(again, x.shape[1]) == sha
    assert 0.75 < head.train_accuracy < 0.9  # a real fit, not a degenerate one
    assert np.array_equal(head.coef[0], -head.coef[1])  # binary: two opposite halves


def test_the_old_recipe_changed_the_bytes():
    """The test above can fail: lbfgs weights in full float32 follow the perturbation."""
    from sklearn.linear_model import LogisticRegression

    x, y = minilm_like()

    def old(xs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = LogisticRegression(C=1.0, max_iter=2000).fit(xs, y)
        return h.coef_.astype(np.float32).tobytes()

    assert old(x) != old(perturbed(x, 1))


def test_grid_rounding():
    w = np.array([[0.3, -1.7, 2e-5], [0.0, 1.23456, -0.5]])
    q, step = round_to_grid(w)
    assert step == 2.0 ** (1 - GRID_BITS)  # max |w| 1.7 -> 2^1
    assert q.dtype == np.float32 and np.all(np.abs(q - w) <= step / 2 + 1e-12)
    assert np.all(np.round(q / step) == q / step)
    assert round_to_grid(np.zeros(3))[1] == 0.0
    with pytest.raises(ModelError):
        round_to_grid(np.array([np.inf]))


def test_absent_classes_never_win_and_bad_inputs_are_one_error():
    x, y = minilm_like(n=300, d=16, k=2)
    head = fit_linear_head(x, y * 2, n_labels=3)  # classes 0 and 2: 1 is absent
    assert head.intercept[1] == ABSENT_CLASS_BIAS and not np.any(head.coef[1])
    assert (head.logits(x).argmax(axis=1) != 1).all()
    with pytest.raises(ModelError, match="NaN or inf"):
        fit_linear_head(np.full((4, 2), np.nan), np.array([0, 1, 0, 1]), n_labels=2)
    with pytest.raises(ModelError, match="at least 2 classes"):
        fit_linear_head(x, np.zeros(len(x), int), n_labels=2)


def test_standardized_fit_is_the_raw_feature_logits_and_keeps_its_bytes():
    """``standardize=True`` (mobilenet_fashion's head): features of very different scales,
    as pooled ReLU6 channels have. The folded raw-feature weights give the logits of the
    fit on standardized features, and the bytes survive the CPU-kernel-sized noise too."""
    from sklearn.linear_model import LogisticRegression

    from quantkit.models.head import solve_logistic_head

    rng = np.random.default_rng(5)
    n, d, k = 1500, 64, 4
    y = rng.integers(0, k, n)
    scales = np.exp(rng.uniform(-3, 2, d))  # ~150x between the smallest and largest scale
    x = ((rng.normal(size=(n, d)) + 0.6 * rng.normal(size=(k, d))[y]) * scales + 0.5 * scales)
    x = x.astype(np.float32)
    coef, intercept, _ = solve_logistic_head(x, y, n_labels=k, C=0.05, standardize=True)
    xs = x.astype(np.float64)
    z = (xs - xs.mean(0)) / xs.std(0)
    ref = LogisticRegression(C=0.05, solver="newton-cg", tol=1e-10, max_iter=500).fit(z, y)
    assert np.allclose(xs @ coef.T + intercept, ref.decision_function(z), atol=1e-6)
    # not the raw-feature fit: another objective
    raw, _, _ = solve_logistic_head(x, y, n_labels=k, C=0.05)
    assert not np.allclose(raw, coef, rtol=1e-3)
    head = fit_linear_head(x, y, n_labels=k, C=0.05, standardize=True)
    sha = model_sha(head, d)
    for seed in (1, 2):
        again = fit_linear_head(perturbed(x, seed), y, n_labels=k, C=0.05, standardize=True)
        assert model_sha(again, d) == sha
    assert head.train_accuracy > 0.6


def test_the_head_does_not_follow_the_blas_thread_count():
    """BLAS runs on every core: the solver's products sum in another order per thread
    count, and the head's bytes stay those of the single-threaded fit (module doc)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    if max((p.get("num_threads") or 1 for p in threadpool_info()
            if p.get("user_api") == "blas"), default=1) < 2:
        pytest.skip("BLAS has one thread on this host: nothing to compare")
    x, y = minilm_like(n=3000, d=384, k=4)
    many = fit_linear_head(x, y, n_labels=4, C=1.0)
    with threadpool_limits(limits=1, user_api="blas"):
        one = fit_linear_head(x, y, n_labels=4, C=1.0)
    assert model_sha(many, 384) == model_sha(one, 384)
