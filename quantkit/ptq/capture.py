"""Small extra FP32 passes some techniques need: per-channel statistics and input samples.

Streaming: per-channel max-abs and mean are running reductions (memory O(channels));
``capture_inputs`` keeps the batches of a *small* calibration subset (the caller bounds it).
Runs ONNX Runtime through ``quantkit.backends.ort.OrtRunner``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from quantkit.backends.runners import ort_runner
from quantkit.errors import CalibrationError

log = logging.getLogger(__name__)

__all__ = ["ChannelStats", "channel_stats", "capture_tensors", "require_batches"]


@dataclass
class ChannelStats:
    """Per-channel running min, max, max-abs and mean of tensors, channel on ``axis``."""

    axis: dict[str, int]
    absmax: dict[str, np.ndarray] = field(default_factory=dict)
    low: dict[str, np.ndarray] = field(default_factory=dict)
    high: dict[str, np.ndarray] = field(default_factory=dict)
    total: dict[str, np.ndarray] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)

    def observe(self, name: str, x: np.ndarray) -> None:
        ax = self.axis[name] % x.ndim
        moved = np.moveaxis(np.asarray(x, dtype=np.float64), ax, -1).reshape(-1, x.shape[ax])
        lo, hi = np.min(moved, axis=0), np.max(moved, axis=0)
        m = np.maximum(-lo, hi)
        s = moved.sum(axis=0)
        if name in self.absmax:
            self.absmax[name] = np.maximum(self.absmax[name], m)
            self.low[name] = np.minimum(self.low[name], lo)
            self.high[name] = np.maximum(self.high[name], hi)
            self.total[name] = self.total[name] + s
            self.count[name] += moved.shape[0]
        else:
            self.absmax[name], self.total[name], self.count[name] = m, s, moved.shape[0]
            self.low[name], self.high[name] = lo, hi

    def mean(self, name: str) -> np.ndarray:
        return self.total[name] / max(self.count[name], 1)


def _runner(model: onnx.ModelProto, outputs: Sequence[str]):
    return ort_runner(None, model, name="ptq-capture", extra_outputs=list(outputs),
                      optimization_level="basic")


def channel_stats(model: onnx.ModelProto, batches: Iterable[Mapping[str, np.ndarray]],
                  axis: Mapping[str, int], *, runner_factory=None) -> ChannelStats:
    """One FP32 pass over ``batches``: per-channel max-abs and mean of each tensor in ``axis``."""
    stats = ChannelStats(dict(axis))
    names = list(axis)
    graph_inputs = {i.name for i in model.graph.input}
    with (runner_factory or _runner)(model, [t for t in names if t not in graph_inputs]) as r:
        n = 0
        for feed in batches:
            out = r.infer(dict(feed))
            for t in names:
                stats.observe(t, feed[t] if t in graph_inputs else out[t])
            n += 1
    require_batches(n, "the per-channel statistics", "ptq.capture.channel_stats")
    return stats


def require_batches(n: int, what: str, where: str) -> None:
    """One clear error when a statistics pass saw no calibration batch (``n == 0``)."""
    if n == 0:
        raise CalibrationError(f"no calibration batches for {what}", where=where, value=0,
                               fix="pass a non-empty calibration split")


def capture_tensors(model: onnx.ModelProto, batches: Iterable[Mapping[str, np.ndarray]],
                    tensors: Sequence[str], *, runner_factory=None
                    ) -> dict[str, list[np.ndarray]]:
    """FP32 values of ``tensors`` for every batch (a list per tensor). Keep ``batches`` small:
    memory is O(samples x tensor size)."""
    graph_inputs = {i.name for i in model.graph.input}
    out: dict[str, list[np.ndarray]] = {t: [] for t in tensors}
    with (runner_factory or _runner)(model, [t for t in tensors if t not in graph_inputs]) as r:
        for feed in batches:
            res = r.infer(dict(feed))
            for t in tensors:
                out[t].append(np.asarray(feed[t] if t in graph_inputs else res[t]))
    if tensors and not out[tensors[0]]:
        raise CalibrationError("no calibration batches to capture", where="ptq.capture",
                               value=0, fix="pass a non-empty calibration subset")
    return out
