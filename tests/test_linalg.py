"""quantkit.linalg: float64 results to BLAS's accuracy, whose bits follow neither the order of
the sums nor numpy's BLAS kernel (issue 48: GPTQ's weights differed between OpenBLAS's Haswell
and SkylakeX kernels on one host)."""

from __future__ import annotations

import numpy as np
import pytest

from blas_kernels import same_under_two_kernels
from quantkit.linalg import cholesky, dot, gram, lower_inverse, matmul, solve_spd_right


def _rows(seed=0, g=2, n=3000, k=40):
    """Correlated float32 rows with columns of scales 1e-3 to 1e2 (bert-like outliers)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g, n, 4)) @ rng.standard_normal((4, k))
    x += 0.1 * rng.standard_normal((g, n, k))
    return (x * np.logspace(-3, 2, k)).astype(np.float32)


def test_gram_is_the_sum_of_products_to_float32_accuracy_in_any_row_order():
    x = _rows()
    h = gram(x)
    x64 = x.astype(np.float64)
    want = np.einsum("gnk,gnl->gkl", x64, x64)
    scale = np.sqrt(np.einsum("gkk->gk", want))
    np.testing.assert_allclose(h / scale[:, :, None] / scale[:, None, :],
                               want / scale[:, :, None] / scale[:, None, :], atol=1e-6, rtol=0)
    perm = np.random.default_rng(1).permutation(x.shape[1])
    assert np.array_equal(gram(x[:, perm]), h)  # exact: the order of the sums cannot matter
    # the permuted float64 sum of the same products does change bits: the check can fail
    assert not np.array_equal(np.einsum("gnk,gnl->gkl", x64[:, perm], x64[:, perm]), want)
    y = _rows(seed=2, k=7)
    np.testing.assert_array_equal(gram(x, y), gram(x[:, perm], y[:, perm]))


def test_matmul_is_blas_to_1e_13_and_its_bits_ignore_the_contraction_order():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 50, 700)) * np.logspace(-4, 4, 700)
    b = rng.standard_normal((3, 700, 60))
    c = matmul(a, b)
    want = np.matmul(a, b)
    bound = np.matmul(np.abs(a), np.abs(b))
    assert np.max(np.abs(c - want) / bound) < 1e-13
    perm = rng.permutation(700)
    assert np.array_equal(matmul(a[:, :, perm], b[:, perm]), c)
    assert not np.array_equal(np.matmul(a[:, :, perm], b[:, perm]), want)
    assert np.array_equal(matmul(a[0], b[0]), c[0])  # 2-d operands too


def test_matmul_blocks_a_long_contraction(monkeypatch):
    import quantkit.linalg as la

    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((5, 300)), rng.standard_normal((300, 4))
    monkeypatch.setattr(la, "_MAX_CONTRACTION", 64)
    np.testing.assert_allclose(la.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12)


def test_cholesky_inverse_and_solve_match_lapack():
    x = _rows(k=300).astype(np.float64)
    h = np.einsum("gnk,gnl->gkl", x, x) + 1e-3 * np.eye(300)
    lo = cholesky(h)
    np.testing.assert_allclose(lo, np.linalg.cholesky(h), rtol=0,
                               atol=1e-11 * np.abs(lo).max())
    assert np.array_equal(lo, np.tril(lo))
    inv = lower_inverse(lo)
    np.testing.assert_allclose(inv, np.linalg.inv(lo), rtol=0, atol=1e-9 * np.abs(inv).max())
    a = np.random.default_rng(5).standard_normal((2, 7, 300))
    want = np.linalg.solve(h, a.transpose(0, 2, 1)).transpose(0, 2, 1)
    np.testing.assert_allclose(solve_spd_right(a, h), want, rtol=1e-6,
                               atol=1e-8 * np.abs(want).max())


def test_cholesky_refuses_a_matrix_that_is_not_positive_definite():
    h = np.eye(3)[None].copy()
    h[0, 2, 2] = -1.0
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        cholesky(h)


def test_dot_is_the_sum_of_products():
    a = np.arange(10, dtype=np.float32)
    assert dot(a, a) == float((a.astype(np.float64) ** 2).sum())


# Runs in a child process (tests/blas_kernels.py): GPTQ's statistics, factor and rounding.
_CHILD = r"""
import hashlib, json
import numpy as np
from quantkit.linalg import cholesky, gram, lower_inverse, matmul, solve_spd_right
from quantkit.ptq.weight_rounding import _output_error, gptq_round

rng = np.random.default_rng(0)
k = 300
x = (rng.standard_normal((1, 5000, 6)) @ rng.standard_normal((6, k))
     + 0.1 * rng.standard_normal((1, 5000, k))).astype(np.float32)
w = rng.standard_normal((1, 40, k))
s = np.abs(w).max(axis=2) / 127
h = gram(x)
hd = h + 0.01 * np.eye(k) * np.einsum("gkk->gk", h).mean()
u = lower_inverse(cholesky(hd))
q = gptq_round(w, h, s)
parts = {"gram": h, "factor": u, "solve": solve_spd_right(w, hd), "matmul": matmul(w, h),
         "gptq": q, "error": np.array([_output_error(w - q * s[:, :, None], h)])}
x64 = x.astype(np.float64)
blas = {"gram": np.matmul(x64.transpose(0, 2, 1), x64), "factor": np.linalg.inv(
    np.linalg.cholesky(hd)), "matmul": np.matmul(w, h)}
digest = lambda v: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()
_out = {"sha256": {k: digest(v) for k, v in parts.items()},
        "blas": {k: digest(v) for k, v in blas.items()}}
"""


def test_gptq_bits_do_not_depend_on_the_blas_kernel():
    """Every result quantkit.linalg gives GPTQ is the same bytes under two OpenBLAS kernels.
    Where numpy's own BLAS results differ between those kernels too, this run would have
    caught the old code; where they agree, the kernels happened to agree on these shapes."""
    pytest.importorskip("threadpoolctl")
    forced, default = same_under_two_kernels(_CHILD)
    assert forced["sha256"] == default["sha256"], (forced, default)
