"""Time a runner: warm-up calls, then timed calls until a repeat cap or a time budget.

Backend-agnostic: anything with ``infer(feed)`` (the Runner protocol) is timed the same
way. Memory is bounded: at most ``max_repeats`` floats per timing.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Timing", "time_runner", "warmup_calls"]


@dataclass
class Timing:
    """Per-call latencies (ms) of the timed runs and why timing stopped."""

    latencies_ms: np.ndarray
    warmup: int
    stopped: str  # "repeats" | "time budget"
    seconds: float

    @property
    def n(self) -> int:
        return int(self.latencies_ms.size)


def warmup_calls(warmup: int, n_feeds: int) -> int:
    """Untimed calls before timing: ``warmup``, but (unless 0: no warm-up at all) at least one
    per feed, so every feed shape is seen before timing (TensorRT re-plans on each new input
    shape, ONNX Runtime allocates)."""
    return 0 if warmup <= 0 else max(int(warmup), int(n_feeds))


def time_runner(infer: Callable[[Mapping[str, np.ndarray]], object],
                feeds: Sequence[Mapping[str, np.ndarray]], *, warmup: int, min_repeats: int,
                max_repeats: int, max_seconds: float,
                clock: Callable[[], int] = time.perf_counter_ns) -> Timing:
    """Call ``infer`` on ``feeds`` (cycled) untimed, ``warmup`` times but at least once per
    feed (:func:`warmup_calls`), then time each call.

    Timed call ``j`` always gets ``feeds[j % len(feeds)]`` (the timed cycle restarts at the
    first feed after the warm-up), so two timings of the same feeds pair up by position.

    Timing stops after ``max_repeats`` calls, or once ``max_seconds`` of timed calls have
    passed, at least ``min_repeats`` calls were timed and the feeds were cycled a whole number
    of times (every feed timed equally often, so candidates compare on the same inputs).
    """
    if not feeds:
        raise ValueError("time_runner needs at least one feed")
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {min_repeats}, {max_repeats}")
    warm = itertools.cycle(feeds)
    n_warm = warmup_calls(warmup, len(feeds))
    for _ in range(n_warm):
        infer(next(warm))
    cycle = itertools.cycle(feeds)
    out = np.empty(max_repeats, dtype=np.float64)
    budget_ns = max_seconds * 1e9
    start = clock()
    n, stopped = 0, "repeats"
    while n < max_repeats:
        feed = next(cycle)
        t0 = clock()
        infer(feed)
        t1 = clock()
        out[n] = (t1 - t0) / 1e6
        n += 1
        if n >= min_repeats and n % len(feeds) == 0 and t1 - start >= budget_ns:
            stopped = "time budget" if n < max_repeats else "repeats"
            break
    return Timing(latencies_ms=out[:n].copy(), warmup=n_warm, stopped=stopped,
                  seconds=(clock() - start) / 1e9)
