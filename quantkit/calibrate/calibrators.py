"""Calibrators: turn one tensor's `HistogramStats` into a symmetric INT8 amax.

scikit-learn shape: constructors only store parameters; ``get_params`` / ``set_params``;
``observe(x)`` (like ``partial_fit``) and ``reset()`` drive an internal HistogramStats and
``amax_`` is the learned range. The core is ``compute_amax(stats) -> float`` so one
streaming pass can feed every calibrator.

- ``minmax``     amax = max |x|.
- ``percentile`` amax = the ``percentile``-th percentile of |x| (histogram resolution).
- ``entropy``    TensorRT's KL-divergence method (as in pytorch-quantization's
                 ``_compute_amax_entropy``), vectorized with prefix sums.
- ``mse``        amax minimizing the expected squared INT8 error, integrated exactly over
                 each bin assuming values are uniform inside a bin (exact zeros cost 0).

On the FP8 E4M3 grid (``FP8_CALIBRATORS``, ``make_calibrator(name, grid="fp8")``): minmax
and percentile as above, ``mse`` on the FP8 grid's error (``Fp8MseCalibrator``).

An all-zero tensor gets ``ALL_ZERO_AMAX``; no calibrator returns 0, inf or NaN.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from quantkit.calibrate.fp8_grid import fp8_error_integral
from quantkit.calibrate.histogram import DEFAULT_NUM_BINS, HistogramStats
from quantkit.errors import CalibrationError, ConfigError
from quantkit.graph.grids import ALL_ZERO_AMAX, INT8_MAX

__all__ = ["Calibrator", "MinMaxCalibrator", "PercentileCalibrator", "EntropyCalibrator",
           "MseCalibrator", "Fp8MseCalibrator", "CALIBRATORS", "FP8_CALIBRATORS", "make_calibrator", "make_calibrators"]

log = logging.getLogger(__name__)



class Calibrator:
    """Base class. Subclasses implement ``_compute(stats) -> float`` and ``_validate()``."""

    name: ClassVar[str] = ""

    def __init__(self, *, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.num_bins = num_bins

    # -- parameters (scikit-learn style) ------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters; ``type(c)(**c.get_params())`` rebuilds ``c``."""
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params: Any) -> "Calibrator":
        valid = self._param_names()
        for k, v in params.items():
            if k not in valid:
                raise ConfigError(f"unknown parameter for calibrator {self.name!r}",
                                  where=f"calibrator.{k}", value=k, fix=f"use one of {valid}")
            setattr(self, k, v)
        return self

    def validate(self) -> "Calibrator":
        """Raise ConfigError if a parameter is out of range."""
        n = self.num_bins
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n & (n - 1):
            raise ConfigError("num_bins must be a power of two >= 2",
                              where=f"calibrator.{self.name}.num_bins", value=n,
                              fix="use e.g. 2048")
        self._validate()
        return self

    def _validate(self) -> None:
        pass

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # -- the math -----------------------------------------------------------------------
    def compute_amax(self, stats: HistogramStats) -> float:
        """Symmetric amax (> 0, finite) for the tensor summarized by ``stats``."""
        return self.compute_amax_with_note(stats)[0]

    def compute_amax_with_note(self, stats: HistogramStats) -> tuple[float, str | None]:
        """``(amax, note)``; note says why a fallback value was used (else None)."""
        self.validate()
        if stats.count_ == 0:
            raise CalibrationError("no finite values observed for this tensor",
                                   where=f"calibrator {self.name}", value=stats.count_,
                                   fix="check the calibration data reaches this tensor")
        if stats.amax_ == 0.0:
            return ALL_ZERO_AMAX, f"all-zero: amax set to {ALL_ZERO_AMAX}"
        amax = float(self._compute(stats))
        if not math.isfinite(amax) or amax <= 0.0:
            log.warning("calibrator %s gave amax=%r; using max |x| = %g", self.name, amax,
                        stats.amax_)
            return float(stats.amax_), f"{self.name} gave amax={amax!r}; used max |x|"
        return amax, None

    def _compute(self, stats: HistogramStats) -> float:
        raise NotImplementedError

    # -- streaming convenience ------------------------------------------------------------
    def observe(self, x: Any) -> "Calibrator":
        """Add values to this calibrator's own histogram (like ``partial_fit``)."""
        if getattr(self, "stats_", None) is None:
            self.validate()
            self.stats_ = HistogramStats(self.num_bins)
        self.stats_.observe(x)
        return self

    def reset(self) -> "Calibrator":
        """Forget everything observed."""
        self.stats_ = None
        return self

    @property
    def amax_(self) -> float:
        stats = getattr(self, "stats_", None)
        if stats is None:
            raise CalibrationError(f"calibrator {self.name!r} has observed nothing",
                                   fix="call observe(x) first")
        return self.compute_amax(stats)


class MinMaxCalibrator(Calibrator):
    """amax = max |x| over everything observed."""

    name = "minmax"

    def __init__(self, *, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.num_bins = num_bins

    def _compute(self, stats: HistogramStats) -> float:
        return stats.amax_


class PercentileCalibrator(Calibrator):
    """amax = ``percentile``-th percentile of |x| (upper edge of the bin; <= max |x|)."""

    name = "percentile"

    def __init__(self, percentile: float = 99.99, *, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.percentile = percentile
        self.num_bins = num_bins

    def _validate(self) -> None:
        q = self.percentile
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < q <= 100.0:
            raise ConfigError("percentile must be in (0, 100]",
                              where="calibrator.percentile.percentile", value=q,
                              fix="use e.g. 99.99")

    def _compute(self, stats: HistogramStats) -> float:
        return stats.percentile(float(self.percentile))


@functools.lru_cache(maxsize=8)
def _level_bounds(num_bins: int, num_quant_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidates i = num_quant_bins..num_bins and, per i, the first bin of each of the
    ``num_quant_bins`` levels: ``ceil(k * i / num_quant_bins)`` for k = 0..num_quant_bins
    (bin j < i belongs to level ``floor(j * num_quant_bins / i)``, as numpy.digitize over
    ``linspace(0, i, num_quant_bins + 1)`` in TensorRT's reference)."""
    i = np.arange(num_quant_bins, num_bins + 1, dtype=np.int64)
    k = np.arange(num_quant_bins + 1, dtype=np.int64)
    bounds = (k[None, :] * i[:, None] + num_quant_bins - 1) // num_quant_bins
    bounds.setflags(write=False)
    i.setflags(write=False)
    return i, bounds


def _xlogx(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    np.multiply(x, np.log(x, out=np.zeros_like(out), where=x > 0), out=out, where=x > 0)
    return out


def entropy_divergences(hist: np.ndarray, num_quant_bins: int = 128
                        ) -> tuple[np.ndarray, np.ndarray]:
    """KL(P || Q) for every threshold i (number of bins kept), TensorRT's definition.

    P = hist[:i] with the outliers hist[i:] added to the last kept bin; Q = hist[:i]
    quantized into ``num_quant_bins`` levels, each level's mass spread evenly over its
    non-empty bins. Uses the identity (P normalized, q un-normalized, T_i = sum hist[:i])
    ``KL = sum P log P - sum P log q + log T_i`` where the middle sum groups by level:
    ``sum_k S_k log(S_k / n_k) + outliers * log q[i-1]``. Returns ``(i, kl)``; thresholds
    with empty bins under a folded outlier mass have ``kl = inf``.
    """
    h = np.asarray(hist, dtype=np.float64)
    n = h.size
    total = h.sum()
    if n < num_quant_bins or total <= 0:
        return np.zeros(0, np.int64), np.zeros(0)
    p = h / total
    i, bounds = _level_bounds(n, num_quant_bins)
    cum = np.concatenate(([0.0], np.cumsum(p)))
    nonzero = np.concatenate(([0], np.cumsum(p > 0)))
    plogp = _xlogx(p)
    cum_plogp = np.concatenate(([0.0], np.cumsum(plogp)))

    mass = cum[bounds[:, 1:]] - cum[bounds[:, :-1]]          # S_k, shape (len(i), levels)
    nnz = nonzero[bounds[:, 1:]] - nonzero[bounds[:, :-1]]   # n_k
    pos = mass > 0
    log_mass = np.log(mass, out=np.zeros_like(mass), where=pos)
    log_nnz = np.log(nnz, out=np.zeros_like(mass), where=pos)
    sum_plogq = np.where(pos, mass * (log_mass - log_nnz), 0.0).sum(axis=1)

    kept = cum[i]
    outliers = np.maximum(cum[-1] - kept, 0.0)
    last = p[i - 1]
    p_last = last + outliers
    sum_plogp = cum_plogp[i] - plogp[i - 1] + _xlogx(p_last)
    q_last = np.divide(mass[:, -1], nnz[:, -1], out=np.zeros(len(i)), where=nnz[:, -1] > 0)
    has_out = outliers > 0
    sum_plogq = sum_plogq + np.where(
        has_out, outliers * np.log(q_last, out=np.zeros(len(i)), where=q_last > 0), 0.0)
    with np.errstate(divide="ignore"):
        kl = sum_plogp - sum_plogq + np.log(kept)
    kl[(has_out & (last <= 0)) | (kept <= 0)] = np.inf
    return i, kl


class EntropyCalibrator(Calibrator):
    """TensorRT's entropy (KL-divergence) calibration, as pytorch-quantization computes it.

    For every threshold i from ``num_quant_bins`` to the last non-empty bin, compare the
    reference distribution (outliers folded into bin i-1) with its ``num_quant_bins``-level
    quantization and keep the i with the smallest KL divergence (the largest such i on
    ties); amax = the bin edge ``i * bin_width`` (clipped to max |x|). Like
    pytorch-quantization, bin 0's count is replaced by bin 1's so a spike of zeros (ReLU,
    padding) does not dominate.
    """

    name = "entropy"

    def __init__(self, num_quant_bins: int = 128, *, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.num_quant_bins = num_quant_bins
        self.num_bins = num_bins

    def _validate(self) -> None:
        q = self.num_quant_bins
        if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or q < 2:
            raise ConfigError("num_quant_bins must be an integer >= 2",
                              where="calibrator.entropy.num_quant_bins", value=q,
                              fix="use 128 for INT8")

    def _compute(self, stats: HistogramStats) -> float:
        nonzero = np.flatnonzero(stats.hist_)
        stop = int(nonzero[-1]) + 1
        nq = int(self.num_quant_bins)
        if stop < nq or stats.num_bins < 2:
            return stats.amax_  # too few bins to search: nothing to clip
        h = stats.hist_[:stop].astype(np.float64)
        h[0] = h[1]
        i, kl = entropy_divergences(h, nq)
        if kl.size == 0 or not np.isfinite(kl).any():
            return stats.amax_
        best = kl.size - 1 - int(np.argmin(kl[::-1]))
        return min(float(i[best]) * stats.bin_width, stats.amax_)


def _quant_error_integral(x: np.ndarray, amax: np.ndarray) -> np.ndarray:
    """F(x) = integral_0^x (y - Q(y))^2 dy for symmetric INT8 with the given amax.

    Q(y) = s * min(round(y / s), 127), s = amax / 127. In units u = y / s, below
    u0 = 126.5 the error is a sawtooth whose integral is ``round(u) / 12 + (u - round(u))**3 / 3``;
    above u0 every value maps to amax and the integral grows by ``((u - 127)**3 + 1/8) / 3``.
    Broadcasts ``x`` (row) against ``amax`` (column).
    """
    s = amax / INT8_MAX
    xs = x * (INT8_MAX / amax)
    u = np.minimum(xs, INT8_MAX - 0.5)
    r = np.rint(u)
    u -= r
    g = u * u
    g *= u
    g *= 1.0 / 3.0
    r *= 1.0 / 12.0
    g += r
    xs -= INT8_MAX
    clip = xs > -0.5
    if clip.any():
        d = xs[clip]
        g[clip] += (d * d * d + 0.125) * (1.0 / 3.0)
    g *= s * s * s
    return g


def mse_curve(stats: HistogramStats, amax: np.ndarray,
              integral: Callable[[np.ndarray, np.ndarray], np.ndarray] = _quant_error_integral
              ) -> np.ndarray:
    """Expected squared error per value for each candidate ``amax`` (1-D array) on the grid
    whose error integral is ``integral`` (INT8 by default; ``fp8_error_integral`` for FP8).

    Values are taken as uniform inside each bin; exact zeros (``n_zero_``) cost nothing.
    By summation by parts, ``sum_j h_j (F(e_{j+1}) - F(e_j)) / w = sum_e F(e) dh_e / w``.
    """
    w = stats.bin_width
    nonzero = np.flatnonzero(stats.hist_)
    last = int(nonzero[-1])
    h = stats.hist_[:last + 1].astype(np.float64)
    h[0] -= stats.n_zero_
    p = h / stats.count_
    padded = np.concatenate(([0.0], p, [0.0]))
    dh = padded[:-1] - padded[1:]                       # weight of edge e = 0..last+1
    edges = np.arange(last + 2, dtype=np.float64) * w
    keep = dh != 0
    edges, dh = edges[keep], dh[keep]
    amax = np.asarray(amax, dtype=np.float64).reshape(-1)
    out = np.empty(amax.size)
    block = max(1, (1 << 18) // max(1, edges.size))
    for start in range(0, amax.size, block):
        a = amax[start:start + block, None]
        # numpy's loops, not BLAS: the argmin over these must not follow the BLAS kernel
        out[start:start + block] = np.einsum("ae,e->a", integral(edges[None, :], a), dh) / w
    return out


class MseCalibrator(Calibrator):
    """amax minimizing the expected squared INT8 quantization error of |x|.

    Candidates are the bin edges up to max |x| (plus max |x| itself); the error of each is
    computed from the histogram (``mse_curve``). The search is coarse-to-fine: 128 evenly
    spaced candidates, then finer grids (step / 8) around the best until every edge
    near the optimum has been tried.
    """

    name = "mse"

    def __init__(self, *, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.num_bins = num_bins

    def _compute(self, stats: HistogramStats) -> float:
        last = int(np.flatnonzero(stats.hist_)[-1])
        w = stats.bin_width
        cands = np.minimum(np.arange(1, last + 2, dtype=np.float64) * w, stats.amax_)
        n = cands.size
        lo, hi, step = 0, n - 1, max(1, -(-n // 128))
        while True:
            idx = np.unique(np.concatenate((np.arange(lo, hi + 1, step), [hi])))
            best = int(idx[int(np.argmin(self._curve(stats, cands[idx])))])
            if step == 1:
                return float(cands[best])
            lo, hi = max(0, best - step), min(n - 1, best + step)
            step = max(1, step // 8)

    def _curve(self, stats: HistogramStats, amax: np.ndarray) -> np.ndarray:
        return mse_curve(stats, amax)


class Fp8MseCalibrator(MseCalibrator):
    """amax minimizing the expected squared FP8 E4M3 error of |x| (``scale = amax / 448``):
    the same search as :class:`MseCalibrator` on the FP8 grid (``fp8_grid.py``)."""

    def _curve(self, stats: HistogramStats, amax: np.ndarray) -> np.ndarray:
        return mse_curve(stats, amax, fp8_error_integral)


CALIBRATORS: dict[str, type[Calibrator]] = {
    "minmax": MinMaxCalibrator,
    "percentile": PercentileCalibrator,
    "entropy": EntropyCalibrator,
    "mse": MseCalibrator,
}
#: the calibrators on the FP8 E4M3 grid (``scale = amax / 448``): max |x| and the percentile
#: do not depend on the grid; mse searches the FP8 grid's error; entropy is INT8's
#: 128-level KL method and has no FP8 form here (ModelOpt's FP8 default is max)
FP8_CALIBRATORS: dict[str, type[Calibrator]] = {
    "minmax": MinMaxCalibrator,
    "percentile": PercentileCalibrator,
    "mse": Fp8MseCalibrator,
}


def make_calibrator(name: str, *, grid: str = "int8", **params: Any) -> Calibrator:
    """Build a registered calibrator by name for the ``grid`` (``int8`` or ``fp8``) it
    serves; ConfigError on unknown names or parameters."""
    table = FP8_CALIBRATORS if grid == "fp8" else CALIBRATORS
    cls = table.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"unknown {grid} calibrator", where="calibrator.name", value=name,
                          fix=f"choose one of {sorted(table)}")
    valid = cls._param_names()
    unknown = sorted(k for k in params if k not in valid)
    if unknown:
        raise ConfigError(f"unknown parameter for calibrator {name!r}",
                          where=f"calibrator.{unknown[0]}", value=unknown,
                          fix=f"use only {valid}")
    return cls(**params).validate()


def make_calibrators(methods: Iterable[str], *, grid: str = "int8",
                     **options: Any) -> dict[str, Calibrator]:
    """``{name: calibrator}`` for ``methods`` on ``grid`` (``int8`` or ``fp8``: every name must
    have a form there, ``FP8_CALIBRATORS``), each given the ``options`` it accepts: the one
    factory of calibrators from ``CalibratorConfig`` (``make_calibrators(cfg.methods,
    percentile=cfg.percentile, num_quant_bins=cfg.num_quant_bins)``). An option no
    registered calibrator accepts is a ConfigError.
    """
    table = FP8_CALIBRATORS if grid == "fp8" else CALIBRATORS
    methods = list(dict.fromkeys(methods))
    if not methods:
        raise ConfigError("no calibrators requested", where="calibrator.methods", value=[],
                          fix=f"list some of {sorted(table)}")
    out = {}
    accepted: set[str] = set()
    for name in methods:
        cls = table.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ConfigError(f"unknown {grid} calibrator", where="calibrator.methods",
                              value=name, fix=f"choose from {sorted(table)}")
        valid = cls._param_names()
        accepted.update(valid)
        out[name] = make_calibrator(name, grid=grid,
                                    **{k: v for k, v in options.items() if k in valid})
    unused = sorted(set(options) - accepted - _KNOWN_OPTIONS)
    if unused:
        raise ConfigError("option not accepted by any requested calibrator",
                          where=f"calibrator.{unused[0]}", value=unused,
                          fix=f"valid options: {sorted(accepted)}")
    return out


#: Options of any registered calibrator (ignored when the requested ones do not use them).
_KNOWN_OPTIONS = {p for table in (CALIBRATORS, FP8_CALIBRATORS) for cls in table.values()
                  for p in cls._param_names()}
