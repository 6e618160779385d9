"""bench.* schema: the latency stage's batch sizes, repeats and budgets; the bench checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import _positive


@dataclass
class BenchConfig:
    """Latency stage (quantkit/bench): warm-up, then timed runs per candidate and batch size."""

    enabled: bool = True
    batch_sizes: list[int] = field(default_factory=lambda: [1, 32])
    warmup: int = 2  # untimed runs per candidate and batch size
    min_repeats: int = 4  # timed runs at least (then whole cycles over the feeds) ...
    repeats: int = 200  # ... and at most (bounds memory and time)
    max_seconds: float = 2.0  # stop timing after this long once min_repeats are done
    feeds: int = 4  # distinct eval batches per batch size, cycled (same for every candidate)
    n_boot: int = 1000  # bootstrap resamples for the intervals
    level: float = 0.95
    target_qps: float = 1000.0  # cost projection: queries per second to serve ...
    p99_budget_ms: float = 250.0  # ... with P99 batch latency within this budget
    candidates: list[str] = field(default_factory=list)  # empty = every candidate
    # reuse a measurement of the same artifact, feeds, host and settings from the stage
    # cache (the report says when it was taken); true = always time afresh
    remeasure: bool = False


def validate_bench(b: BenchConfig) -> None:
    """The bench (latency) settings (bench.*)."""
    if not b.batch_sizes:
        raise ConfigError("config key bench.batch_sizes is empty", value=[],
                          fix="e.g. bench.batch_sizes=[1,32], or bench.enabled=false")
    for i, n in enumerate(b.batch_sizes):
        _positive(f"bench.batch_sizes[{i}]", n)
    if len(set(b.batch_sizes)) != len(b.batch_sizes):
        raise ConfigError("config key bench.batch_sizes repeats a value",
                          value=list(b.batch_sizes), fix="list each batch size once")
    _positive("bench.warmup", b.warmup, allow_zero=True)
    _positive("bench.min_repeats", b.min_repeats)
    if b.repeats < b.min_repeats:
        raise ConfigError("config key bench.repeats must be >= bench.min_repeats",
                          value=b.repeats, fix=f"set bench.repeats >= {b.min_repeats}")
    _positive("bench.max_seconds", b.max_seconds, allow_zero=True)
    _positive("bench.feeds", b.feeds)
    _positive("bench.n_boot", b.n_boot)
    if not 0.0 < b.level < 1.0:
        raise ConfigError("config key bench.level must be in (0, 1)", value=b.level,
                          fix="e.g. bench.level=0.95")
    _positive("bench.target_qps", b.target_qps)
    _positive("bench.p99_budget_ms", b.p99_budget_ms)
