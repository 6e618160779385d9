"""Streaming histogram statistics of one tensor's absolute values (pure numpy, no I/O).

`HistogramStats` keeps ``num_bins`` integer counts of ``|x|`` over ``[0, range_)`` plus
exact counters (finite / non-finite / zero values, amax, signed min/max, sum, sum of
squares). Memory is O(bins), never O(samples).

The range rule makes streaming exact and order-independent: ``range_`` is always the
smallest power of two strictly greater than the running amax (floored at ``MIN_RANGE``;
0.0 while only zeros were seen). Because bin edges are ``k * range_ / num_bins`` with
both factors powers of two, a value's bin index ``floor(|x| * num_bins / range_)`` is
computed without rounding, and growing the range by ``2**k`` merges exactly ``2**k``
neighbouring bins. Hence observing A then B gives bit-identical counts to observing
``concat(A, B)``, and ``merge`` is exact too.

Non-finite values (NaN, +-inf) are counted in ``n_nonfinite_`` and never binned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from quantkit.linalg import dot
from quantkit.errors import CalibrationError, ConfigError

__all__ = ["HistogramStats", "combine_stats", "DEFAULT_NUM_BINS", "MIN_RANGE"]

DEFAULT_NUM_BINS = 2048
#: Smallest non-zero histogram range; keeps ``num_bins / range_`` a normal float32.
MIN_RANGE = 2.0 ** -64
#: Elements processed per step in ``observe`` (bounds temporaries, stays in cache).
_CHUNK = 1 << 18
_F32_MAX = float(np.finfo(np.float32).max)
_FORMAT = "quantkit.histogram"


def _range_for(amax: float) -> float:
    """Smallest power of two > ``amax`` (at least ``MIN_RANGE``); 0.0 for ``amax == 0``."""
    if amax <= 0.0:
        return 0.0
    _, exp = math.frexp(amax)  # amax = m * 2**exp with 0.5 <= m < 1, so 2**exp > amax
    return max(MIN_RANGE, math.ldexp(1.0, exp))


def _rebin(hist: np.ndarray, old_range: float, new_range: float) -> np.ndarray:
    """Counts of ``hist`` (over ``[0, old_range)``) re-binned exactly onto ``[0, new_range)``."""
    if old_range == new_range:
        return hist.copy()
    n = hist.size
    if old_range == 0.0:  # only exact zeros so far: they stay in bin 0
        return hist.copy()
    if new_range < old_range:
        raise CalibrationError("histogram range cannot shrink", value=(old_range, new_range),
                               fix="this is a bug in quantkit.calibrate.histogram")
    factor = int(round(new_range / old_range))
    out = np.zeros(n, dtype=np.int64)
    if factor >= n:
        out[0] = hist.sum()
    else:
        out[: n // factor] = hist.reshape(n // factor, factor).sum(axis=1)
    return out


class HistogramStats:
    """Histogram of ``|x|`` plus exact moments for one tensor, fed batch by batch.

    ``observe(x)`` works like scikit-learn's ``partial_fit``; ``merge(other)`` adds another
    instance's statistics; ``reset()`` forgets. Learned state ends in ``_``.
    """

    def __init__(self, num_bins: int = DEFAULT_NUM_BINS) -> None:
        self.num_bins = num_bins
        self._check_num_bins()
        self.reset()

    # -- state --------------------------------------------------------------------------
    def _check_num_bins(self) -> None:
        n = self.num_bins
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2 or n & (n - 1):
            raise ConfigError("histogram num_bins must be a power of two >= 2",
                              where="calibrator.num_bins", value=n, fix="use e.g. 2048")
        self.num_bins = int(n)

    def reset(self) -> "HistogramStats":
        """Forget everything observed."""
        self.hist_ = np.zeros(self.num_bins, dtype=np.int64)
        self.range_ = 0.0
        self.count_ = 0
        self.n_nonfinite_ = 0
        self.n_zero_ = 0
        self.amax_ = 0.0
        self.min_: float | None = None
        self.max_: float | None = None
        self.sum_ = 0.0
        self.sumsq_ = 0.0
        return self

    def _grow(self, amax: float) -> None:
        new_range = _range_for(amax)
        if new_range > self.range_:
            self.hist_ = _rebin(self.hist_, self.range_, new_range)
            self.range_ = new_range

    # -- streaming ------------------------------------------------------------------------
    def observe(self, x: Any) -> "HistogramStats":
        """Add the values of array ``x`` (any shape; cast to float32)."""
        arr = np.asarray(x)
        if arr.dtype != np.float32:
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(np.float32)  # beyond float32 range -> inf -> non-finite
        flat = arr.reshape(-1)
        for start in range(0, flat.size, _CHUNK):
            self._observe_chunk(flat[start:start + _CHUNK])
        return self

    def _observe_chunk(self, flat: np.ndarray) -> None:
        a = np.abs(flat)
        amax = a.max()
        if not np.isfinite(amax):
            finite = np.isfinite(a)
            n_finite = int(np.count_nonzero(finite))
            self.n_nonfinite_ += a.size - n_finite
            if n_finite == 0:
                return
            flat = flat[finite]
            a = a[finite]
            amax = a.max()
        amax = float(amax)
        n = a.size
        self.count_ += n
        self.n_zero_ += int(np.count_nonzero(a == 0))
        lo, hi = float(flat.min()), float(flat.max())
        self.min_ = lo if self.min_ is None else min(self.min_, lo)
        self.max_ = hi if self.max_ is None else max(self.max_, hi)
        if amax * amax * n >= _F32_MAX:  # float32 sum of squares would overflow (e.g. finfo.min masks)
            a64 = a.astype(np.float64)
            self.sum_ += float(flat.sum(dtype=np.float64))
            self.sumsq_ += dot(a64, a64)
        else:
            self.sum_ += float(flat.sum(dtype=np.float32))
            self.sumsq_ += dot(a, a)
        if amax > self.amax_:
            self.amax_ = amax
        self._grow(amax)
        if self.range_ == 0.0:  # only zeros so far
            self.hist_[0] += n
            return
        # Exact: num_bins / range_ is a power of two, so the product is not rounded.
        np.multiply(a, np.float32(self.num_bins / self.range_), out=a)
        idx = a.astype(np.intp)
        self.hist_ += np.bincount(idx, minlength=self.num_bins)

    def merge(self, other: "HistogramStats") -> "HistogramStats":
        """Add ``other``'s statistics to this instance (exact)."""
        if not isinstance(other, HistogramStats):
            raise CalibrationError("can only merge HistogramStats", value=type(other).__name__)
        if other.num_bins != self.num_bins:
            raise CalibrationError("cannot merge histograms with different num_bins",
                                   value=(self.num_bins, other.num_bins),
                                   fix="collect all statistics with the same num_bins")
        rng = max(self.range_, other.range_)
        self.hist_ = _rebin(self.hist_, self.range_, rng) + _rebin(other.hist_, other.range_, rng)
        self.range_ = rng
        self.count_ += other.count_
        self.n_nonfinite_ += other.n_nonfinite_
        self.n_zero_ += other.n_zero_
        self.amax_ = max(self.amax_, other.amax_)
        if other.min_ is not None:
            self.min_ = other.min_ if self.min_ is None else min(self.min_, other.min_)
            self.max_ = other.max_ if self.max_ is None else max(self.max_, other.max_)
        self.sum_ += other.sum_
        self.sumsq_ += other.sumsq_
        return self

    def copy(self) -> "HistogramStats":
        out = HistogramStats(self.num_bins)
        out.__dict__.update(self.__dict__)
        out.hist_ = self.hist_.copy()
        return out

    # -- derived --------------------------------------------------------------------------
    @property
    def bin_width(self) -> float:
        return self.range_ / self.num_bins

    def bin_edges(self) -> np.ndarray:
        """``num_bins + 1`` edges over ``[0, range_]`` (float64)."""
        return np.arange(self.num_bins + 1, dtype=np.float64) * self.bin_width

    def rebinned(self, new_range: float) -> np.ndarray:
        """Counts re-binned onto ``[0, new_range)`` (a power-of-two multiple of ``range_``)."""
        return _rebin(self.hist_, self.range_, new_range)

    @property
    def mean(self) -> float:
        return self.sum_ / self.count_ if self.count_ else float("nan")

    @property
    def std(self) -> float:
        if not self.count_:
            return float("nan")
        mean = self.sum_ / self.count_
        return math.sqrt(max(0.0, self.sumsq_ / self.count_ - mean * mean))

    def percentile(self, q: float) -> float:
        """Upper edge of the bin where the CDF of ``|x|`` first reaches ``q`` percent,
        clipped to ``amax_`` (within one bin width of ``numpy.percentile(|x|, q)``)."""
        if not 0.0 < q <= 100.0:
            raise ConfigError("percentile must be in (0, 100]", where="percentile", value=q)
        if self.count_ == 0:
            return float("nan")
        if q == 100.0:
            return self.amax_
        cum = np.cumsum(self.hist_)
        b = int(np.searchsorted(cum, (q / 100.0) * self.count_, side="left"))
        b = min(b, self.num_bins - 1)
        return min((b + 1) * self.bin_width, self.amax_)

    def summary(self) -> dict[str, Any]:
        """Small JSON-safe description for reports."""
        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)
        return {
            "count": int(self.count_), "n_nonfinite": int(self.n_nonfinite_),
            "n_zero": int(self.n_zero_), "amax": float(self.amax_),
            "min": num(self.min_), "max": num(self.max_),
            "mean": num(self.mean), "std": num(self.std),
            "p99": num(self.percentile(99.0)), "p99_9": num(self.percentile(99.9)),
            "p99_99": num(self.percentile(99.99)),
        }

    # -- serialization ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT, "version": 1, "num_bins": self.num_bins, "range": self.range_,
            "hist": self.hist_.tolist(), "count": int(self.count_),
            "n_nonfinite": int(self.n_nonfinite_), "n_zero": int(self.n_zero_),
            "amax": self.amax_, "min": self.min_, "max": self.max_,
            "sum": self.sum_, "sumsq": self.sumsq_,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HistogramStats":
        keys = ("num_bins", "range", "hist", "count", "n_nonfinite", "n_zero", "amax",
                "min", "max", "sum", "sumsq")
        if not isinstance(d, dict) or d.get("format", _FORMAT) != _FORMAT:
            raise CalibrationError("not a serialized HistogramStats", value=type(d).__name__)
        missing = [k for k in keys if k not in d]
        if missing:
            raise CalibrationError("serialized HistogramStats lacks keys", value=missing,
                                   fix="re-run calibration to regenerate the statistics")
        out = cls(int(d["num_bins"]))
        hist = np.asarray(d["hist"], dtype=np.int64)
        if hist.shape != (out.num_bins,) or (hist < 0).any():
            raise CalibrationError("serialized histogram has the wrong length or negative counts",
                                   value=hist.shape)
        rng = float(d["range"])
        if not (rng == 0.0 or (rng >= MIN_RANGE and math.frexp(rng)[0] == 0.5)):
            raise CalibrationError("serialized histogram range is not a power of two", value=rng)
        out.hist_ = hist
        out.range_ = rng
        out.count_ = int(d["count"])
        out.n_nonfinite_ = int(d["n_nonfinite"])
        out.n_zero_ = int(d["n_zero"])
        out.amax_ = float(d["amax"])
        out.min_ = None if d["min"] is None else float(d["min"])
        out.max_ = None if d["max"] is None else float(d["max"])
        out.sum_ = float(d["sum"])
        out.sumsq_ = float(d["sumsq"])
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistogramStats):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"HistogramStats(num_bins={self.num_bins}, count_={self.count_}, "
                f"amax_={self.amax_:.6g}, range_={self.range_:.6g})")


def combine_stats(stats: Sequence[HistogramStats],
                  weights: Sequence[int] | np.ndarray | None = None) -> HistogramStats:
    """``sum_k weights[k] * stats[k]`` as one HistogramStats (exact; weights are counts).

    Used for bootstrap resamples of calibration chunks: weight k = how often chunk k
    was drawn. Zero-weight entries contribute nothing (not even amax/min/max).
    """
    if not stats:
        raise CalibrationError("no statistics to combine")
    w = np.ones(len(stats), dtype=np.int64) if weights is None else np.asarray(weights, np.int64)
    if w.shape != (len(stats),) or (w < 0).any():
        raise CalibrationError("combine weights must be non-negative, one per statistic",
                               value=w.tolist())
    n = stats[0].num_bins
    if any(s.num_bins != n for s in stats):
        raise CalibrationError("cannot combine histograms with different num_bins")
    out = HistogramStats(n)
    used = [(int(k), s) for k, s in zip(w, stats) if k > 0]
    if not used:
        return out
    rng = max(s.range_ for _, s in used)
    out.range_ = rng
    for k, s in used:
        out.hist_ += k * s.rebinned(rng)
        out.count_ += k * s.count_
        out.n_nonfinite_ += k * s.n_nonfinite_
        out.n_zero_ += k * s.n_zero_
        out.amax_ = max(out.amax_, s.amax_)
        if s.min_ is not None:
            out.min_ = s.min_ if out.min_ is None else min(out.min_, s.min_)
            out.max_ = s.max_ if out.max_ is None else max(out.max_, s.max_)
        out.sum_ += k * s.sum_
        out.sumsq_ += k * s.sumsq_
    return out
