"""Linear algebra whose bits do not depend on numpy's BLAS kernel.

numpy's ``matmul``, ``dot``, ``linalg.inv`` and ``linalg.cholesky`` call OpenBLAS, whose
kernels (picked per CPU, or by ``OPENBLAS_CORETYPE``) sum in other orders, so the last bits
of every result differ between kernels. Where a decision follows (GPTQ rounds each column
after the updates of the columns before it; a calibrator takes an argmin), those bits become
other artifacts (issue 48: mobilenet_int8's GPTQ weights differed under Haswell and SkylakeX).

Here every sum that a BLAS kernel performs is exact: the operands are cut into integer slices
times powers of two (the Ozaki scheme), so every partial sum of a BLAS product is an integer
below 2**53 and the kernel's order cannot change it; the slices' products are added in a fixed
order. :func:`gram` (sums over many rows, one 20-bit slice per column) and :func:`matmul`
(three slices, float64 accuracy) work so; :func:`cholesky`, :func:`lower_inverse` and
:func:`solve_spd_right` are blocked loops of fixed order around them (numpy's ``einsum``, its
own loops, never BLAS, for the small vector steps). Evidence: tests/test_linalg.py (bytes
under two OpenBLAS kernels in subprocesses).
"""

from __future__ import annotations

import numpy as np

__all__ = ["dot", "gram", "matmul", "cholesky", "lower_inverse", "solve_spd_right", "GRAM_BITS"]

#: bits kept per column by :func:`gram` (relative to the column's largest magnitude)
GRAM_BITS = 20
#: rows per exact product: ``rows * 2**(2 * GRAM_BITS) <= 2**52``
_GRAM_ROWS = 1 << (52 - 2 * GRAM_BITS)
#: columns per block of :func:`cholesky` and :func:`lower_inverse`
_BLOCK = 128
#: bits :func:`matmul` keeps of each operand's row, float64's (in slices of up to 26 bits; 3
#: slices: 6 products)
_BITS = 53
#: longest contraction of one :func:`matmul` block (slices of 18 bits)
_MAX_CONTRACTION = 1 << 17


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``sum a * b`` of two 1-d arrays in numpy's own loops (``np.dot`` calls BLAS)."""
    return float(np.einsum("i,i->", a, b))


def _fixed(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` (G, N, K) as integers ``m`` (float64, ``|m| <= 2**GRAM_BITS``) and per-column
    powers of two ``q`` (G, K) with ``a ~ m * q`` (round to nearest at ``2**-GRAM_BITS`` of
    the column's largest magnitude)."""
    a = np.asarray(a, dtype=np.float64)
    amax = np.max(np.abs(a), axis=1) if a.shape[1] else np.zeros((a.shape[0], a.shape[2]))
    _, e = np.frexp(amax)  # amax < 2**e
    q = np.ldexp(1.0, e - GRAM_BITS)
    return np.rint(a / q[:, None, :]), q


def gram(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``sum_n a[g, n, k] * b[g, n, l]`` (G, K, L) float64, the same bits on every BLAS kernel
    and in every row order within a block of :data:`_GRAM_ROWS` rows (``b`` None: ``a``).

    Each block of rows is rounded per column to :data:`GRAM_BITS` bits (a relative error of
    ``2**-21`` of the column's largest value, below float32's own rows' error after a sum) and
    multiplied as integers: exact in float64, whatever order the kernel sums in. Blocks are
    added in row order."""
    a = np.asarray(a)
    b = a if b is None else np.asarray(b)
    if a.ndim != 3 or b.ndim != 3 or a.shape[:2] != b.shape[:2]:
        raise ValueError(f"gram: expected (G, N, K) and (G, N, L) arrays; got {a.shape} and "
                         f"{b.shape}")
    out = np.zeros((a.shape[0], a.shape[2], b.shape[2]))
    for start in range(0, a.shape[1], _GRAM_ROWS):
        ma, qa = _fixed(a[:, start:start + _GRAM_ROWS])
        mb, qb = (ma, qa) if b is a else _fixed(b[:, start:start + _GRAM_ROWS])
        out += np.matmul(ma.transpose(0, 2, 1), mb) * qa[:, :, None] * qb[:, None, :]
    return out


def _split(a: np.ndarray, axis: int, bits: int, slices: int) -> list[np.ndarray]:
    """``a`` as ``slices`` slices ``m * q``: integers ``|m| <= 2**bits`` times powers of
    two ``q`` (one per row along ``axis``, smaller by ``2**bits`` each slice), summing to ``a``
    to ``2**-(bits * slices)`` of each row's largest magnitude. Every step is exact: a slice
    is ``rest`` rounded to a multiple of ``q``, so ``rest`` minus it is representable; a
    product of two slices sums integers times one common power of two."""
    _, e = np.frexp(np.max(np.abs(a), axis=axis, keepdims=True))
    out, rest = [], a
    for i in range(1, slices + 1):
        q = np.ldexp(1.0, e - bits * i)
        m = np.rint(rest / q) * q
        out.append(m)
        rest = rest - m
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` over the last two axes (leading axes broadcast), float64, the same bits on
    every BLAS kernel: each operand in integer slices (the Ozaki scheme; Ozaki
    et al. 2012, "Error-free transformations of matrix multiplication"), each pair of slices
    one BLAS product of integers whose every partial sum is below 2**53 (exact, whatever the
    kernel's order), the pairs added in a fixed order. Accurate to about ``2**-53`` of
    ``|a| |b|`` (rows times columns); long contractions go in blocks."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[-1]
    if n > _MAX_CONTRACTION:
        return sum((matmul(a[..., i:i + _MAX_CONTRACTION], b[..., i:i + _MAX_CONTRACTION, :])
                    for i in range(0, n, _MAX_CONTRACTION)), start=np.zeros(()))
    bits = (53 - max(1, int(n - 1).bit_length())) // 2
    slices = -(-_BITS // bits)
    sa, sb = _split(a, -1, bits, slices), _split(b, -2, bits, slices)
    pairs = sorted(((i, j) for i in range(slices) for j in range(slices) if i + j < slices),
                   key=lambda p: (-(p[0] + p[1]), p))  # smallest terms first
    out = None
    for i, j in pairs:
        term = np.matmul(sa[i], sb[j])
        out = term if out is None else out + term
    return out


def _cholesky_block(d: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``d`` (G, B, B), reading its lower triangle, column by column."""
    g, n, _ = d.shape
    lo = np.zeros_like(d)
    for j in range(n):
        left = lo[:, j, :j]
        pivot = d[:, j, j] - np.einsum("gk,gk->g", left, left)
        if not np.all(pivot > 0):
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        lo[:, j, j] = np.sqrt(pivot)
        lo[:, j + 1:, j] = ((d[:, j + 1:, j] - np.einsum("gik,gk->gi", lo[:, j + 1:, :j], left))
                            / lo[:, j, j][:, None])
    return lo


def cholesky(h: np.ndarray) -> np.ndarray:
    """Lower ``L`` with ``h = L L^T`` per leading index of ``h`` (G, K, K), float64; reads the
    lower triangle. Raises ``np.linalg.LinAlgError`` where ``h`` is not positive definite, as
    ``np.linalg.cholesky`` does."""
    a = np.array(h, dtype=np.float64)
    lo = np.zeros_like(a)
    k = a.shape[-1]
    for j0 in range(0, k, _BLOCK):
        j1 = min(j0 + _BLOCK, k)
        d = _cholesky_block(a[:, j0:j1, j0:j1])
        lo[:, j0:j1, j0:j1] = d
        if j1 == k:
            break
        panel = matmul(a[:, j1:, j0:j1], _lower_inverse_block(d).transpose(0, 2, 1))
        lo[:, j1:, j0:j1] = panel
        a[:, j1:, j1:] -= matmul(panel, panel.transpose(0, 2, 1))
    return lo


def _lower_inverse_block(lo: np.ndarray) -> np.ndarray:
    """``lo^-1`` for lower triangular ``lo`` (G, B, B), by forward substitution."""
    g, n, _ = lo.shape
    x = np.zeros_like(lo)
    for j in range(n):
        rhs = -np.einsum("gk,gkc->gc", lo[:, j, :j], x[:, :j, :])
        rhs[:, j] += 1.0
        x[:, j, :] = rhs / lo[:, j, j][:, None]
    return x


def lower_inverse(lo: np.ndarray) -> np.ndarray:
    """``lo^-1`` (lower triangular) for lower triangular ``lo`` (G, K, K), float64."""
    lo = np.asarray(lo, dtype=np.float64)
    k = lo.shape[-1]
    rhs = np.zeros_like(lo)  # solves lo x = I block row by block row; rhs: I minus what is known
    idx = np.arange(k)
    rhs[:, idx, idx] = 1.0
    for r0 in range(0, k, _BLOCK):
        r1 = min(r0 + _BLOCK, k)
        rows = matmul(_lower_inverse_block(lo[:, r0:r1, r0:r1]), rhs[:, r0:r1, :r1])
        rhs[:, r0:r1, :r1] = rows
        if r1 < k:
            rhs[:, r1:, :r1] -= matmul(lo[:, r1:, r0:r1], rows)
    return np.tril(rhs)


def solve_spd_right(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``a @ h^-1`` for ``a`` (G, R, K) and symmetric positive definite ``h`` (G, K, K):
    ``h^-1 = L^-T L^-1`` with ``L`` its Cholesky factor, applied as two products."""
    x = lower_inverse(cholesky(h))
    return matmul(matmul(a, x.transpose(0, 2, 1)), x)
