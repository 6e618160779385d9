"""Time a TensorRT engine on the GPU: CUDA events around the engine alone, on inputs already
on the device, with the host copies timed apart (trtexec's "GPU Compute Time" vs "H2D/D2H
Latency"); optionally one CUDA graph per input shape.

The runner must offer the steps of :class:`quantkit.backends.trt.TrtRunner`: ``stage(feed)``
(copy to the device, set shapes and addresses), ``launch()`` (enqueue), ``fetch()`` (copy
back, synchronize), ``synchronize()`` and ``stream_.ptr``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from quantkit.bench.timing import Timing, warmup_calls

__all__ = ["DeviceTiming", "time_on_device"]


@dataclass
class DeviceTiming(Timing):
    """GPU compute time per timed call (``latencies_ms``) plus the host copies of each feed."""

    h2d_ms: np.ndarray | None = None  # per distinct feed: host -> device copy of its inputs
    d2h_ms: np.ndarray | None = None  # per distinct feed: device -> host copy of its outputs
    cuda_graphs: bool = False


def time_on_device(runner, feeds: Sequence[Mapping[str, np.ndarray]], *, warmup: int,
                   min_repeats: int, max_repeats: int, max_seconds: float,
                   cuda_graphs: bool = False,
                   clock: Callable[[], int] = time.perf_counter_ns) -> DeviceTiming:
    """Same stopping rules and feed order as :func:`~quantkit.bench.timing.time_runner`, but
    each timed value is the GPU time between CUDA events recorded around the engine launch on
    device-resident inputs. Every feed (shape) is warmed up before timing starts; with
    ``cuda_graphs`` each feed's launch is captured once and replayed."""
    from quantkit.backends.trt.cuda import CudaGraph, Event, elapsed_ms

    if not feeds:
        raise ValueError("time_on_device needs at least one feed")
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {min_repeats}, {max_repeats}")
    where = getattr(runner, "name", "engine")
    start, end = Event(where=where), Event(where=where)
    stream = runner.stream_.ptr
    graphs: dict[int, object] = {}
    try:
        n_warm = warmup_calls(warmup, len(feeds))
        h2d = np.zeros(len(feeds))
        d2h = np.zeros(len(feeds))
        for i, j in enumerate(itertools.islice(itertools.cycle(range(len(feeds))), n_warm)):
            start.record(stream)
            runner.stage(feeds[j])
            end.record(stream)
            h2d[j] = elapsed_ms(start, end)
            runner.launch()
            start.record(stream)
            runner.fetch()
            end.record(stream)
            d2h[j] = elapsed_ms(start, end)
        if cuda_graphs:  # buffers reached their largest size in the warm-up: addresses are fixed
            for j, feed in enumerate(feeds):
                runner.stage(feed)
                graphs[j] = CudaGraph(stream, runner.launch, where=where)
                runner.synchronize()
        out = np.empty(max_repeats, dtype=np.float64)
        budget_ns = max_seconds * 1e9
        t_start = clock()
        n, stopped = 0, "repeats"
        cycle = itertools.cycle(range(len(feeds)))
        while n < max_repeats:
            j = next(cycle)
            runner.stage(feeds[j])
            start.record(stream)
            if cuda_graphs:
                graphs[j].launch()
            else:
                runner.launch()
            end.record(stream)
            out[n] = elapsed_ms(start, end)
            n += 1
            if n >= min_repeats and n % len(feeds) == 0 and clock() - t_start >= budget_ns:
                stopped = "time budget" if n < max_repeats else "repeats"
                break
        return DeviceTiming(latencies_ms=out[:n].copy(), warmup=n_warm, stopped=stopped,
                            seconds=(clock() - t_start) / 1e9, h2d_ms=h2d, d2h_ms=d2h,
                            cuda_graphs=cuda_graphs)
    finally:
        for g in graphs.values():
            g.free()
        start.free()
        end.free()
