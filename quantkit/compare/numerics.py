"""The backend-check gate: may a number measured on one execution stand for another?

Two executions of the same plan (the artifact on a backend and its emulation; ORT's fused
integer kernels and exact Q/DQ; ORT and TensorRT) that disagree on a fraction ``f`` of the
examples can differ in accuracy by up to ``f``: every flipped prediction changes at most one
example's correctness. A sign-off allows the candidate to lose at most ``margin_abs``
(absolute, in accuracy units). So the gate's tolerance is a share of that margin
(``share * margin_abs``, default half), not a fixed agreement like 0.9, and it is tested with
an exact one-sided binomial (Clopper-Pearson) bound at ``alpha``:

- ``pass``: the upper bound of the flip rate is within the tolerance;
- ``fail``: the lower bound is above it;
- ``inconclusive``: neither; ``n_needed`` says how many examples would decide at the
  observed rate.

``noise_flip_rate`` is the flip rate between two executions that should be equivalent
(e.g. ``qdq_mode`` fused vs exact of the same artifact on this host). When it exceeds the
tolerance the result says the CPU result does not transfer (another host or TensorRT may
score differently by more than the margin allows) and that a TensorRT evaluation is
required.

Numerics only: numpy / scipy, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta

from quantkit.errors import ConfigError

__all__ = ["NumericsGate", "numerics_gate", "flip_count", "flip_rate_bounds"]


@dataclass(frozen=True)
class NumericsGate:
    """The gate's result; ``bool(gate)`` means "passed and the result transfers"."""

    status: str  # pass | fail | inconclusive
    flips: int
    n: int
    flip_rate: float
    flip_rate_lower: float
    flip_rate_upper: float
    margin_abs: float
    share: float
    tolerance: float
    alpha: float
    noise_flips: int | None
    noise_n: int | None
    noise_flip_rate: float | None
    noise_to_margin: float | None
    transfers: bool | None  # None: no noise measurement given
    tensorrt_required: bool
    n_needed: int | None
    reasons: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.status == "pass" and self.transfers is not False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def flip_count(a_pred: np.ndarray, b_pred: np.ndarray) -> int:
    """Examples whose predicted class differs between two executions (same order)."""
    a, b = np.asarray(a_pred), np.asarray(b_pred)
    if a.shape != b.shape:
        raise ConfigError("predictions of the two executions differ in shape",
                          where="flip_count", value=f"{a.shape} vs {b.shape}",
                          fix="pass the predictions of the same examples in the same order")
    return int(np.count_nonzero(a != b))


def flip_rate_bounds(flips: int, n: int, *, alpha: float = 0.025) -> tuple[float, float]:
    """Exact one-sided (1 - alpha) Clopper-Pearson lower and upper bounds of flips / n."""
    lo = 0.0 if flips == 0 else float(beta.ppf(alpha, flips, n - flips + 1))
    hi = 1.0 if flips == n else float(beta.ppf(1 - alpha, flips + 1, n - flips))
    return lo, hi


def _n_needed(rate: float, tolerance: float, alpha: float, n: int) -> int | None:
    """Smallest n (>= the current one) at which ``rate`` would pass; None if it cannot."""
    if rate >= tolerance:
        return None
    lo, hi = n, max(n, 1)
    while flip_rate_bounds(round(rate * hi), hi, alpha=alpha)[1] > tolerance:
        lo, hi = hi, hi * 2
        if hi > 10 ** 9:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if flip_rate_bounds(round(rate * mid), mid, alpha=alpha)[1] > tolerance:
            lo = mid
        else:
            hi = mid
    return hi


def _count(rate: float, n: int, where: str) -> int:
    if not (isinstance(n, (int, np.integer)) and n > 0):
        raise ConfigError("the number of compared examples must be a positive integer",
                          where=where, value=n, fix="pass the size of the compared subset")
    if not (0.0 <= rate <= 1.0) or math.isnan(rate):
        raise ConfigError("a flip rate must be in [0, 1]", where=where, value=rate,
                          fix="pass flips / n of the two executions")
    return int(round(rate * n))


def numerics_gate(flip_rate: float, n: int, margin_abs: float, *,
                  noise_flip_rate: float | None = None, noise_n: int | None = None,
                  share: float = 0.5, alpha: float = 0.025,
                  what: str = "artifact on the backend vs its emulation",
                  noise_what: str = "two equivalent executions") -> NumericsGate:
    """Gate ``flip_rate`` (over ``n`` examples) against ``share * margin_abs``.

    ``margin_abs``: the verdict's non-inferiority margin in absolute metric units (a
    relative margin times the FP32 metric). ``noise_flip_rate`` / ``noise_n`` (default
    ``n``): the flip rate between two executions that should be equivalent; reported, and
    when above the tolerance the result says the CPU result does not transfer.
    """
    if not (margin_abs > 0 and math.isfinite(margin_abs)):
        raise ConfigError("the gate needs a positive absolute margin", where="numerics_gate",
                          value=margin_abs, fix="pass verdict.margin in absolute units "
                                                "(relative margin x FP32 metric)")
    if not 0 < share <= 1:
        raise ConfigError("share of the margin must be in (0, 1]", where="numerics_gate(share)",
                          value=share, fix="use e.g. 0.5: numerics may use half the margin")
    if not 0 < alpha < 0.5:
        raise ConfigError("alpha must be in (0, 0.5)", where="numerics_gate(alpha)", value=alpha,
                          fix="use the sign-off's one-sided alpha, 0.025")
    flips = _count(flip_rate, n, "numerics_gate(flip_rate, n)")
    tol = share * margin_abs
    lo, hi = flip_rate_bounds(flips, n, alpha=alpha)
    rate = flips / n
    reasons = []
    if hi <= tol:
        status = "pass"
        reasons.append(f"{what}: {flips} of {n} predictions flip ({rate:.4f}, upper bound "
                       f"{hi:.4f}) within the tolerance {tol:.4f} = {share:g} x margin "
                       f"{margin_abs:.4f}")
    elif lo > tol:
        status = "fail"
        reasons.append(f"{what}: {flips} of {n} predictions flip ({rate:.4f}, lower bound "
                       f"{lo:.4f}), more than the tolerance {tol:.4f} = {share:g} x margin "
                       f"{margin_abs:.4f}: the two executions can differ in accuracy by more "
                       f"than the margin allows")
    else:
        status = "inconclusive"
        reasons.append(f"{what}: {flips} of {n} predictions flip ({rate:.4f}, bounds "
                       f"[{lo:.4f}, {hi:.4f}]) against the tolerance {tol:.4f}: too few "
                       f"examples to decide")
    needed = _n_needed(rate, tol, alpha, n) if status == "inconclusive" else None
    if needed is not None:
        reasons.append(f"{needed} compared examples would decide at the observed rate")
    nflips = nrate = ratio = transfers = None
    if noise_flip_rate is not None:
        noise_n = int(noise_n if noise_n is not None else n)
        nflips = _count(noise_flip_rate, noise_n, "numerics_gate(noise_flip_rate, noise_n)")
        nrate = nflips / noise_n
        ratio = nrate / margin_abs
        transfers = nrate <= tol
        if transfers:
            reasons.append(f"numerics noise ({noise_what}): flip rate {nrate:.4f} = "
                           f"{ratio:.2f} x the margin")
        else:
            reasons.append(f"numerics noise ({noise_what}): flip rate {nrate:.4f} = "
                           f"{ratio:.2f} x the margin {margin_abs:.4f}, above the tolerance "
                           f"{tol:.4f}: the CPU result does not transfer; a TensorRT "
                           f"evaluation is required")
    required = status == "fail" or transfers is False
    return NumericsGate(status=status, flips=flips, n=int(n), flip_rate=rate, flip_rate_lower=lo,
                        flip_rate_upper=hi, margin_abs=float(margin_abs), share=float(share),
                        tolerance=tol, alpha=float(alpha), noise_flips=nflips,
                        noise_n=noise_n if noise_flip_rate is not None else None,
                        noise_flip_rate=nrate, noise_to_margin=ratio, transfers=transfers,
                        tensorrt_required=required, n_needed=needed, reasons=tuple(reasons))
