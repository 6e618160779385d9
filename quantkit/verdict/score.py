"""Score intervals for proportions: honest when discordant pairs are few or absent.

A percentile bootstrap over identical predictions has zero width (every resample gives
delta 0), so ten identical examples would "prove" non-inferiority. Score intervals invert a
test whose variance is taken under the hypothesis tested, so they stay wide when the data
are few, whatever the data say:

* :func:`tango_interval` / :func:`tango_statistic`: Tango (1998, Stat Med 17:891-908) score
  interval for the difference of paired proportions ``delta = (c - b) / n``, with ``b`` the
  pairs only the reference gets right and ``c`` those only the candidate gets right. For
  ``H0: delta = delta0`` the statistic is::

      T(delta0) = (c - b - n delta0) / sqrt(n (2 p_b~ + delta0 (1 - delta0)))

  with ``p_b~`` the maximum-likelihood estimate of ``P(b)`` restricted to ``delta0``, the
  positive root of ``2n p^2 + B p + C = 0``, ``B = -(b + c) + (2n - c + b) delta0``,
  ``C = -b delta0 (1 - delta0)``. ``T`` decreases in ``delta0``; the two-sided (1 - alpha)
  limits solve ``T = +-z_{1-alpha/2}``. The one-sided non-inferiority p-value at
  ``delta0 = -margin`` is ``1 - Phi(T(-margin))``, so "lower limit > -margin" and
  "p < alpha/2" are the same decision. With ``b = c = 0`` and ``n = 10`` the 95% interval is
  about ``[-0.28, +0.28]``.
* :func:`newcombe_interval`: Newcombe's (1998, Stat Med 17:2635-2650) method 10, Wilson
  intervals of the two marginal proportions combined with a correlation correction; a
  closed-form cross-check of Tango.
* :func:`wilson_interval` and :func:`wilson_p_above`: the Wilson score interval and test for
  one proportion (agreement with FP32, flip rate).
* :func:`clopper_pearson_interval` and :func:`clopper_pearson_p_above`: the exact binomial
  (Clopper & Pearson 1934, Biometrika 26:404-413) interval and test of one proportion, the
  share of examples within a per-example tolerance (label-free cosine / KL / |logit delta| /
  recall@k). Its one-sided error is at most alpha for every true share and every n: no
  normal approximation, so skewed or heavy-tailed scores cannot make it anti-conservative
  (the test sees only whether each example is within the tolerance). With ``x = n`` the
  lower limit is ``alpha^(1/n) < 1``: never of zero width. Non-integer (Rao-Scott) counts
  use the same beta quantiles (Korn & Graubard 1998, Survey Methodology 24:193-201).

Counts may be non-integer: dividing ``b, c, n`` by a design effect is the Rao-Scott
adjustment for grouped (clustered) data used in ``quantkit.verdict.paired_accuracy``.
Numerics only (numpy/scipy), no I/O.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import beta as beta_dist
from scipy.stats import norm

from quantkit.errors import DataError

__all__ = ["clopper_pearson_interval", "clopper_pearson_p_above", "newcombe_interval",
           "tango_interval", "tango_p_noninferiority", "tango_statistic", "wilson_interval",
           "wilson_p_above"]

_EDGE = 1e-9


def _check_counts(b: float, c: float, n: float, where: str) -> tuple[float, float, float]:
    b, c, n = float(b), float(c), float(n)
    if not (math.isfinite(b) and math.isfinite(c) and math.isfinite(n)) or b < 0 or c < 0 \
            or n <= 0 or b + c > n * (1 + 1e-12):
        raise DataError("paired counts must satisfy 0 <= b, c and b + c <= n, n > 0", where=where,
                        value=(b, c, n), fix="pass the discordant counts of n paired examples")
    return b, c, n


def tango_statistic(b: float, c: float, n: float, delta0: float) -> float:
    """Tango's score statistic ``T(delta0)`` for ``delta = (c - b) / n`` (module docstring)."""
    b, c, n = _check_counts(b, c, n, "tango_statistic")
    d0 = float(delta0)
    big_b = -(b + c) + (2.0 * n - c + b) * d0
    big_c = -b * d0 * (1.0 - d0)
    p_b = (math.sqrt(max(big_b * big_b - 8.0 * n * big_c, 0.0)) - big_b) / (4.0 * n)
    var = n * (2.0 * p_b + d0 * (1.0 - d0))
    num = c - b - n * d0
    if var <= 0.0:
        return 0.0 if abs(num) <= 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_p_noninferiority(b: float, c: float, n: float, delta0: float) -> float:
    """One-sided p-value of ``H0: delta <= delta0`` (small = evidence that delta > delta0)."""
    return float(norm.sf(tango_statistic(b, c, n, delta0)))


def tango_interval(b: float, c: float, n: float, *, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Tango score interval of ``(c - b) / n``."""
    b, c, n = _check_counts(b, c, n, "tango_interval")
    z = float(norm.ppf(1.0 - alpha / 2.0))
    lo_edge, hi_edge = -1.0 + _EDGE, 1.0 - _EDGE

    def root(target: float) -> float:
        f_lo = tango_statistic(b, c, n, lo_edge) - target
        f_hi = tango_statistic(b, c, n, hi_edge) - target
        if f_lo <= 0.0:
            return -1.0
        if f_hi >= 0.0:
            return 1.0
        return float(brentq(lambda d: tango_statistic(b, c, n, d) - target, lo_edge, hi_edge,
                            xtol=1e-10, rtol=1e-12))

    return root(z), root(-z)


def wilson_interval(x: float, n: float, *, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Wilson score interval of the proportion ``x / n``."""
    x, n = float(x), float(n)
    if not (0.0 <= x <= n * (1 + 1e-12)) or n <= 0:
        raise DataError("a proportion needs 0 <= x <= n and n > 0", where="wilson_interval",
                        value=(x, n), fix="pass a count and its total")
    z = float(norm.ppf(1.0 - alpha / 2.0))
    p = min(x / n, 1.0)
    den = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / den
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_p_above(x: float, n: float, p0: float) -> float:
    """One-sided score-test p-value of ``H0: p <= p0`` (inverts :func:`wilson_interval`)."""
    if not 0.0 < p0 < 1.0:
        raise DataError("the null proportion must be in (0, 1)", where="wilson_p_above",
                        value=p0, fix="declare a minimum agreement strictly between 0 and 1")
    z = (float(x) / float(n) - p0) / math.sqrt(p0 * (1.0 - p0) / float(n))
    return float(norm.sf(z))


def _check_share(x: float, n: float, where: str) -> tuple[float, float]:
    x, n = float(x), float(n)
    if not (math.isfinite(x) and math.isfinite(n)) or n <= 0 or not 0.0 <= x <= n * (1 + 1e-12):
        raise DataError("a proportion needs 0 <= x <= n and n > 0", where=where, value=(x, n),
                        fix="pass a count and its total")
    return min(x, n), n


def clopper_pearson_interval(x: float, n: float, *, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval of ``x / n``: each side has error at
    most alpha / 2 (``x``, ``n`` may be non-integer effective counts)."""
    x, n = _check_share(x, n, "clopper_pearson_interval")
    low = 0.0 if x <= 0.0 else float(beta_dist.ppf(alpha / 2.0, x, n - x + 1.0))
    high = 1.0 if x >= n else float(beta_dist.ppf(1.0 - alpha / 2.0, x + 1.0, n - x))
    return low, high


def clopper_pearson_p_above(x: float, n: float, p0: float) -> float:
    """Exact one-sided p-value of ``H0: p <= p0``: ``P(X >= x | n, p0)``, the regularized
    incomplete beta ``I_p0(x, n - x + 1)``; "p < alpha" is "the lower limit of
    :func:`clopper_pearson_interval` at ``2 alpha`` lies above p0"."""
    x, n = _check_share(x, n, "clopper_pearson_p_above")
    if not 0.0 < p0 < 1.0:
        raise DataError("the null proportion must be in (0, 1)", where="clopper_pearson_p_above",
                        value=p0, fix="declare a minimum share strictly between 0 and 1")
    return 1.0 if x <= 0.0 else float(beta_dist.cdf(p0, x, n - x + 1.0))


def newcombe_interval(a: float, b: float, c: float, d: float, *,
                      alpha: float) -> tuple[float, float]:
    """Newcombe's method 10 interval of ``(c - b) / n`` for the paired table.

    ``a``: both right, ``b``: reference only, ``c``: candidate only, ``d``: neither.
    """
    n = float(a + b + c + d)
    _check_counts(b, c, n, "newcombe_interval")
    p1 = (a + c) / n  # candidate right
    p2 = (a + b) / n  # reference right
    l1, u1 = wilson_interval(a + c, n, alpha=alpha)
    l2, u2 = wilson_interval(a + b, n, alpha=alpha)
    margins = [(a + c), (b + d), (a + b), (c + d)]
    if min(margins) == 0:
        psi = 0.0
    else:
        prod = float(np.prod(np.asarray(margins, dtype=np.float64)))
        big_a = a * d - c * b
        if big_a > n / 2.0:
            psi = (big_a - n / 2.0) / math.sqrt(prod)
        elif big_a >= 0.0:
            psi = 0.0
        else:
            psi = big_a / math.sqrt(prod)
    est = p1 - p2
    low = est - math.sqrt(max((p1 - l1) ** 2 + (u2 - p2) ** 2
                              - 2.0 * psi * (p1 - l1) * (u2 - p2), 0.0))
    high = est + math.sqrt(max((p2 - l2) ** 2 + (u1 - p1) ** 2
                               - 2.0 * psi * (p2 - l2) * (u1 - p1), 0.0))
    return low, high
