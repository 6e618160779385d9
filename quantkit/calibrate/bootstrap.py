"""How stable is each amax? Bootstrap over calibration chunks, one pass, bounded memory.

``collect_stats(..., num_chunks=K)`` keeps one HistogramStats per tensor per chunk
(batch b goes to chunk ``b % K``). A bootstrap resample draws K chunks with replacement
(``np.random.default_rng(seed)``), adds their histograms exactly (``combine_stats``) and
re-runs each calibrator. Memory is O(K x tensors x bins); pure numpy, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from quantkit.calibrate.calibrators import Calibrator
from quantkit.calibrate.ranges import exclusion_reason
from quantkit.calibrate.histogram import HistogramStats, combine_stats
from quantkit.errors import CalibrationError

__all__ = ["AmaxSpread", "bootstrap_ranges"]


@dataclass(frozen=True)
class AmaxSpread:
    """Spread of one tensor's amax over bootstrap resamples of the calibration chunks.

    ``amax`` is the value on the full calibration set; ``rel_spread = std / mean``.
    """

    amax: float
    mean: float
    std: float
    min: float
    max: float
    rel_spread: float
    num_resamples: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def bootstrap_ranges(chunk_stats: Sequence[Mapping[str, HistogramStats]],
                     calibrators: Mapping[str, Calibrator], *,
                     num_resamples: int = 32, seed: int = 0,
                     tensors: Iterable[str] | None = None
                     ) -> dict[str, dict[str, AmaxSpread]]:
    """``{calibrator key: {tensor: AmaxSpread}}`` over ``num_resamples`` resamples.

    Tensors excluded from quantization (non-finite values, nothing observed) are skipped.
    The same resample draws are used for every tensor and calibrator.
    """
    k = len(chunk_stats)
    if k < 2:
        raise CalibrationError("bootstrap needs at least 2 non-empty calibration chunks",
                               where="bootstrap_ranges", value=k,
                               fix="collect with num_chunks >= 2 and at least that many batches")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 2:
        raise CalibrationError("num_resamples must be an integer >= 2", value=num_resamples)
    names = list(tensors) if tensors is not None else list(chunk_stats[0])
    for i, chunk in enumerate(chunk_stats):
        missing = [t for t in names if t not in chunk]
        if missing:
            raise CalibrationError("chunk lacks statistics for some tensors",
                                   where=f"chunk {i}", value=missing[:5])
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(k, np.full(k, 1.0 / k), size=num_resamples)  # (R, K) counts

    out: dict[str, dict[str, AmaxSpread]] = {key: {} for key in calibrators}
    for t in names:
        per_chunk = [chunk[t] for chunk in chunk_stats]
        full = combine_stats(per_chunk)
        if exclusion_reason(full) is not None:
            continue
        resamples = [combine_stats(per_chunk, counts) for counts in draws]
        for key, cal in calibrators.items():
            base = cal.compute_amax(full)
            values = np.array([cal.compute_amax(s) if s.count_ else base for s in resamples])
            if values.min() == values.max():  # avoid rounding noise in mean/std
                mean, std = float(values[0]), 0.0
            else:
                mean, std = float(values.mean()), float(values.std(ddof=1))
            out[key][t] = AmaxSpread(
                amax=float(base), mean=mean, std=std, min=float(values.min()),
                max=float(values.max()),
                rel_spread=std / mean if mean > 0 and math.isfinite(std) else 0.0,
                num_resamples=int(num_resamples))
    return out
