"""Tensor comparison metrics: pure functions and a streaming, mergeable accumulator.

Every function takes the truth first (``reference``), then the ``candidate``; options are
keyword-only. Inputs are cast to float64 before any arithmetic, so float32 and float16
tensors are compared exactly (their difference is representable in float64).

Edge cases never produce NaN:

* ``sqnr_db``: identical inputs (zero noise) give ``float('inf')``; a zero reference with
  a non-zero candidate gives ``float('-inf')``. JSON has no infinity, so records store
  :func:`json_safe_sqnr_db`, which clamps to ``+/- SQNR_DB_CAP`` (200 dB). 200 dB is above
  anything a float32 round trip can show (a 24-bit mantissa bounds real SQNR near 150 dB),
  so a stored 200.0 only ever means "identical".
* ``cosine_similarity``: both zero -> 1.0 (identical); exactly one zero -> 0.0.
* ``relative_error``: both zero -> 0.0; zero reference, non-zero candidate -> inf
  (``json_safe_stats`` turns that into None).

Numerics only: numpy, no I/O, no randomness.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
from scipy.special import log_softmax

from quantkit.errors import ConfigError, DataError
from quantkit.linalg import dot

__all__ = [
    "SQNR_DB_CAP",
    "LayerStats",
    "clipping_rate",
    "cosine_similarity",
    "first_diverging",
    "flag_layers",
    "json_safe_sqnr_db",
    "json_safe_stats",
    "kl_divergence",
    "kl_per_example",
    "max_abs_error",
    "mean_abs_error",
    "noise_power_from_sqnr_db",
    "relative_error",
    "sqnr_db",
]

#: JSON-safe stand-in for an infinite SQNR (see module docstring).
SQNR_DB_CAP = 200.0

#: FP16 noise floor used when the FP16 run reproduces a tensor exactly (noise power 0):
#: 1e-8 relative noise power = 80 dB, finer than FP16 rounding (~66 dB) can produce.
MIN_NOISE_FLOOR = 1e-8


# --------------------------------------------------------------------------- helpers


def _same_shape(reference: Any, candidate: Any, *, what: str, where: str, fix: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Both as float64 arrays; one DataError when their shapes differ."""
    r = np.asarray(reference, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if r.shape != c.shape:
        raise DataError(f"reference and candidate {what}have different shapes", where=where,
                        value=(r.shape, c.shape), fix=fix)
    return r, c


def _pair(reference: Any, candidate: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    r, c = _same_shape(reference, candidate, what="", where=where,
                       fix="compare the same tensor from the same examples in both runs")
    if r.size == 0:
        raise DataError("cannot compare empty tensors", where=where, value=r.shape,
                        fix="pass at least one element")
    return r.ravel(), c.ravel()


def _sqnr_from_sums(signal: float, noise: float) -> float:
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _cosine_from_sums(rc: float, r2: float, c2: float) -> float:
    if r2 == 0.0 and c2 == 0.0:
        return 1.0
    if r2 == 0.0 or c2 == 0.0:
        return 0.0
    return float(min(1.0, max(-1.0, rc / math.sqrt(r2 * c2))))


def _relative_from_sums(d2: float, r2: float) -> float:
    if d2 == 0.0:
        return 0.0
    if r2 == 0.0:
        return math.inf
    return math.sqrt(d2 / r2)


def _check_amax(amax: Any, where: str) -> np.ndarray:
    a = np.asarray(amax, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise DataError("amax must be finite and >= 0", where=where, value=amax,
                        fix="pass the calibrated range (a non-negative number or "
                            "per-channel array)")
    return a


def _clipped_count(values: np.ndarray, amax: np.ndarray, where: str) -> int:
    try:
        beyond = np.abs(values) > amax
    except ValueError as err:
        raise DataError("amax does not broadcast against the tensor", where=where,
                        value=(np.shape(amax), values.shape),
                        fix="pass a scalar amax or a per-channel array that broadcasts") from err
    if beyond.shape != values.shape:
        raise DataError("amax does not broadcast against the tensor", where=where,
                        value=(np.shape(amax), values.shape),
                        fix="pass a scalar amax or a per-channel array that broadcasts")
    return int(np.count_nonzero(beyond))


# --------------------------------------------------------------------------- pure functions


def sqnr_db(reference: Any, candidate: Any) -> float:
    """Signal-to-quantization-noise ratio, ``10 log10(sum r^2 / sum (r - c)^2)`` in dB.

    ``inf`` for identical inputs, ``-inf`` for a zero reference with a non-zero candidate.
    Use :func:`json_safe_sqnr_db` before writing to JSON.
    """
    r, c = _pair(reference, candidate, "sqnr_db")
    d = r - c
    return _sqnr_from_sums(dot(r, r), dot(d, d))


def cosine_similarity(reference: Any, candidate: Any) -> float:
    """Cosine of the angle between the flattened tensors, in [-1, 1]."""
    r, c = _pair(reference, candidate, "cosine_similarity")
    return _cosine_from_sums(dot(r, c), dot(r, r), dot(c, c))


def max_abs_error(reference: Any, candidate: Any) -> float:
    """``max |r - c|``."""
    r, c = _pair(reference, candidate, "max_abs_error")
    return float(np.max(np.abs(r - c)))


def mean_abs_error(reference: Any, candidate: Any) -> float:
    """``mean |r - c|``."""
    r, c = _pair(reference, candidate, "mean_abs_error")
    return float(np.mean(np.abs(r - c)))


def relative_error(reference: Any, candidate: Any) -> float:
    """``||r - c|| / ||r||`` (L2 norms); 0.0 when both are zero, inf for a zero reference."""
    r, c = _pair(reference, candidate, "relative_error")
    d = r - c
    return _relative_from_sums(dot(d, d), dot(r, r))


def clipping_rate(values: Any, *, amax: Any) -> float:
    """Fraction of ``values`` with ``|v| > amax`` (amax scalar or broadcastable per-channel)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise DataError("cannot measure clipping of an empty tensor", where="clipping_rate",
                        value=v.shape, fix="pass at least one element")
    a = _check_amax(amax, "clipping_rate(amax)")
    return _clipped_count(v, a, "clipping_rate(amax)") / v.size


def kl_per_example(p_logits_ref: Any, q_logits_cand: Any) -> np.ndarray:
    """``KL(softmax(p) || softmax(q))`` per row (n,) in nats, for logits (n, classes)."""
    p = np.asarray(p_logits_ref, dtype=np.float64)
    q = np.asarray(q_logits_cand, dtype=np.float64)
    if p.ndim != 2 or p.shape != q.shape or p.size == 0:
        raise DataError("reference and candidate logits must both be (examples, classes)",
                        where="kl_per_example", value=(p.shape, q.shape),
                        fix="compare logits of the same examples")
    log_p, log_q = log_softmax(p, axis=1), log_softmax(q, axis=1)
    prob_p = np.exp(log_p)
    with np.errstate(invalid="ignore"):
        terms = np.where(prob_p > 0.0, prob_p * (log_p - log_q), 0.0)
    return np.maximum(terms.sum(axis=1), 0.0)


def kl_divergence(p_logits_ref: Any, q_logits_cand: Any) -> float:
    """Mean over rows of ``KL(softmax(p) || softmax(q))`` in nats; last axis is the class axis.

    Rows are every index of the leading axes (a 1-D input is one row). Computed with
    log-softmax, so large logits do not overflow; terms where ``p = 0`` contribute 0.
    Identical logits give exactly 0.0; tiny negative round-off is clamped to 0.
    """
    p, q = _same_shape(p_logits_ref, q_logits_cand, what="logits ", where="kl_divergence",
                       fix="compare logits of the same examples")
    if p.size == 0 or p.ndim == 0:
        raise DataError("kl_divergence needs at least one row of logits",
                        where="kl_divergence", value=p.shape,
                        fix="pass logits of shape (..., classes)")
    k = p.shape[-1]
    p = p.reshape(-1, k)
    q = q.reshape(-1, k)
    log_p = log_softmax(p, axis=1)
    log_q = log_softmax(q, axis=1)
    prob_p = np.exp(log_p)
    with np.errstate(invalid="ignore"):
        terms = np.where(prob_p > 0.0, prob_p * (log_p - log_q), 0.0)
    return float(max(0.0, np.mean(np.sum(terms, axis=1))))


def json_safe_sqnr_db(value: float | None, *, cap: float = SQNR_DB_CAP) -> float | None:
    """Clamp an SQNR to ``[-cap, cap]`` so it can be written to JSON (None stays None)."""
    if value is None:
        return None
    return float(min(cap, max(-cap, value)))


def json_safe_stats(stats: Mapping[str, Any], *, cap: float = SQNR_DB_CAP) -> dict[str, Any]:
    """A copy of a :meth:`LayerStats.result` dict that JSON accepts.

    ``sqnr_db`` is clamped to ``+/- cap``; any other non-finite float becomes None.
    """
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if key == "sqnr_db":
            out[key] = json_safe_sqnr_db(value, cap=cap)
        elif isinstance(value, float) and not math.isfinite(value):
            out[key] = None
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- streaming


class LayerStats:
    """Streaming comparison of one tensor across batches; O(1) memory, mergeable.

    ``update(reference_batch, candidate_batch, amax=...)`` accumulates, in float64:
    sum r^2, sum (r-c)^2, sum r*c, sum c^2, max |r-c|, sum |r-c|, element count, and, for
    batches given an ``amax``, how many *reference* values had ``|r| > amax`` (clipping
    the calibrated range would cause) out of how many were checked. ``merge`` adds another
    accumulator's state (A.merge(B) == update over A's then B's batches). ``result()``
    returns the same numbers the pure functions give on the concatenated batches;
    ``clipping_rate`` is None when no batch had an amax.

    The noise term is summed directly as sum (r-c)^2 (not r^2 - 2rc + c^2), so
    near-identical tensors keep full precision.
    """

    _FIELDS = ("sum_r2_", "sum_d2_", "sum_rc_", "sum_c2_", "max_abs_", "sum_abs_",
               "count_", "clipped_", "clip_checked_")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> "LayerStats":
        """Forget everything observed."""
        self.sum_r2_ = 0.0
        self.sum_d2_ = 0.0
        self.sum_rc_ = 0.0
        self.sum_c2_ = 0.0
        self.max_abs_ = 0.0
        self.sum_abs_ = 0.0
        self.count_ = 0
        self.clipped_ = 0
        self.clip_checked_ = 0
        return self

    def update(self, reference_batch: Any, candidate_batch: Any, *,
               amax: Any = None) -> "LayerStats":
        """Accumulate one batch (any shape; reference and candidate shapes must match)."""
        r_full, c_full = _same_shape(reference_batch, candidate_batch, what="batches ",
                                     where="LayerStats.update",
                                     fix="feed the same examples to both runs")
        if r_full.size == 0:
            return self
        if amax is not None:
            a = _check_amax(amax, "LayerStats.update(amax)")
            self.clipped_ += _clipped_count(r_full, a, "LayerStats.update(amax)")
            self.clip_checked_ += r_full.size
        r = r_full.ravel()
        c = c_full.ravel()
        d = r - c
        abs_d = np.abs(d)
        self.sum_r2_ += dot(r, r)
        self.sum_d2_ += dot(d, d)
        self.sum_rc_ += dot(r, c)
        self.sum_c2_ += dot(c, c)
        self.max_abs_ = max(self.max_abs_, float(np.max(abs_d)))
        self.sum_abs_ += float(np.sum(abs_d))
        self.count_ += int(r.size)
        return self

    def merge(self, other: "LayerStats") -> "LayerStats":
        """Add ``other``'s accumulated state into this one (in place); returns self."""
        if not isinstance(other, LayerStats):
            raise TypeError(f"can only merge LayerStats, got {type(other).__name__}")
        self.sum_r2_ += other.sum_r2_
        self.sum_d2_ += other.sum_d2_
        self.sum_rc_ += other.sum_rc_
        self.sum_c2_ += other.sum_c2_
        self.max_abs_ = max(self.max_abs_, other.max_abs_)
        self.sum_abs_ += other.sum_abs_
        self.count_ += other.count_
        self.clipped_ += other.clipped_
        self.clip_checked_ += other.clip_checked_
        return self

    def state(self) -> dict[str, float | int]:
        """The raw accumulators (JSON-safe), e.g. for a stage cache."""
        return {name.rstrip("_"): getattr(self, name) for name in self._FIELDS}

    @classmethod
    def from_state(cls, state: Mapping[str, float | int]) -> "LayerStats":
        """Rebuild an accumulator from :meth:`state`."""
        stats = cls()
        for name in cls._FIELDS:
            value = state[name.rstrip("_")]
            setattr(stats, name, int(value) if name in ("count_", "clipped_", "clip_checked_")
                    else float(value))
        return stats

    def result(self) -> dict[str, Any]:
        """cosine, sqnr_db, max_abs_error, mean_abs_error, relative_error, clipping_rate, count."""
        if self.count_ == 0:
            raise DataError("no elements observed", where="LayerStats.result", value=0,
                            fix="call update() with at least one non-empty batch")
        return {
            "cosine": _cosine_from_sums(self.sum_rc_, self.sum_r2_, self.sum_c2_),
            "sqnr_db": _sqnr_from_sums(self.sum_r2_, self.sum_d2_),
            "max_abs_error": self.max_abs_,
            "mean_abs_error": self.sum_abs_ / self.count_,
            "relative_error": _relative_from_sums(self.sum_d2_, self.sum_r2_),
            "clipping_rate": (self.clipped_ / self.clip_checked_ if self.clip_checked_ else None),
            "count": self.count_,
        }


# --------------------------------------------------------------------------- layer table


def noise_power_from_sqnr_db(value: float) -> float:
    """Relative noise power ``sum (r-c)^2 / sum r^2 = 10^(-sqnr/10)``; inf dB -> 0.0."""
    if value == math.inf:
        return 0.0
    if value == -math.inf:
        return math.inf
    return 10.0 ** (-float(value) / 10.0)


def _sqnr_of(stats: Mapping[str, Any] | None) -> float | None:
    if stats is None:
        return None
    value = stats.get("sqnr_db")
    return None if value is None else float(value)


def flag_layers(int8_stats: Mapping[str, Mapping[str, Any]],
                fp16_stats: Mapping[str, Mapping[str, Any]], *,
                order: Iterable[str], floor_multiple: float = 10.0,
                min_noise_floor: float = MIN_NOISE_FLOOR) -> list[dict[str, Any]]:
    """One row per tensor, in topological ``order``, flagging INT8 error far above FP16's.

    Both runs are compared against the same FP32 reference. For each tensor:
    ``int8_noise = 10^(-int8_sqnr_db/10)`` and ``fp16_noise`` likewise (relative noise
    power); ``floor = max(fp16_noise, min_noise_floor)``; ``ratio = int8_noise / floor``;
    the tensor is flagged when ``ratio > floor_multiple``. ``min_noise_floor`` stands in
    when FP16 reproduces a tensor exactly or has no stats for it (``fp16_sqnr_db`` None).
    Tensors in ``order`` without INT8 stats are skipped (not measured); the row's
    ``position`` is the index in ``order``.
    """
    if not (isinstance(floor_multiple, (int, float)) and floor_multiple > 0):
        raise ConfigError("floor_multiple must be a positive number",
                          where="compare.floor_multiple", value=floor_multiple,
                          fix="use e.g. 10.0 (flag INT8 noise 10x above the FP16 floor)")
    if not (isinstance(min_noise_floor, (int, float)) and min_noise_floor > 0):
        raise ConfigError("min_noise_floor must be a positive number",
                          where="compare.min_noise_floor", value=min_noise_floor,
                          fix="use e.g. 1e-8")
    rows: list[dict[str, Any]] = []
    for position, name in enumerate(order):
        int8_db = _sqnr_of(int8_stats.get(name))
        if int8_db is None:
            continue
        fp16_db = _sqnr_of(fp16_stats.get(name))
        int8_noise = noise_power_from_sqnr_db(int8_db)
        fp16_noise = None if fp16_db is None else noise_power_from_sqnr_db(fp16_db)
        floor = max(fp16_noise or 0.0, float(min_noise_floor))
        ratio = int8_noise / floor
        rows.append({
            "name": name,
            "position": position,
            "int8_sqnr_db": int8_db,
            "fp16_sqnr_db": fp16_db,
            "int8_noise": int8_noise,
            "fp16_noise": fp16_noise,
            "floor": floor,
            "ratio": ratio,
            "flagged": bool(ratio > floor_multiple),
        })
    return rows


def first_diverging(int8_stats: Mapping[str, Mapping[str, Any]],
                    fp16_stats: Mapping[str, Mapping[str, Any]], *,
                    order: Iterable[str], floor_multiple: float = 10.0,
                    min_noise_floor: float = MIN_NOISE_FLOOR) -> str | None:
    """Name of the first flagged tensor in topological order (see :func:`flag_layers`), or None."""
    for row in flag_layers(int8_stats, fp16_stats, order=order, floor_multiple=floor_multiple,
                           min_noise_floor=min_noise_floor):
        if row["flagged"]:
            return row["name"]
    return None
