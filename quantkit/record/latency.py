"""Latency of the record: a candidate's timings per batch size (``candidate.latency``) and the
run's latency section (``record.latency``: what the timings belong to, the cost projection),
as quantkit/bench/stage.py measures them."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.record.serde import JsonObject, inline, optional

__all__ = ["CostFit", "CostProjection", "CostRow", "CostSaving", "ExecutionLabel", "HostLabel", "LatencyRecord", "LatencySettings",
           "LatencyStats", "NotFasterFlag", "VsFp16"]


@dataclass
class VsFp16:
    """An INT8 candidate's latency against FP16 at one batch size (run by run)."""

    median_ratio_vs_fp16: float
    median_ratio_vs_fp16_ci: list[float]
    pairs: int
    status: str
    int8_not_faster: bool


@dataclass(kw_only=True)
class LatencyStats:
    """One candidate at one batch size: percentiles and throughput with their intervals,
    how the timing ran, when it was measured (``reused``: read from the stage cache)."""

    n: int
    batch_size: int
    level: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p50_ms: float
    p50_ms_ci: list[float]
    p90_ms: float
    p90_ms_ci: list[float]
    p99_ms: float
    p99_ms_ci: list[float]
    throughput: float
    throughput_ci: list[float]
    warmup: int
    stopped: str
    timed_seconds: float
    feeds: int
    timed: str | None = optional()  # GPU: compute time (CUDA events) vs host copies
    cuda_graphs: bool | None = optional()
    h2d_ms_mean: float | None = optional()
    d2h_ms_mean: float | None = optional()
    measured_at: str | None = optional()
    reused: bool | None = optional()
    vs_fp16: VsFp16 | None = optional()

    def percentile(self, p: str) -> tuple[float, list[float]]:
        """(value, interval) of percentile ``p`` ("p50", "p90", "p99") in ms."""
        return {"p50": (self.p50_ms, self.p50_ms_ci), "p90": (self.p90_ms, self.p90_ms_ci),
                "p99": (self.p99_ms, self.p99_ms_ci)}[p]


@dataclass
class HostLabel:
    """The host the timings were taken on (``record.latency.host``)."""

    cpu: str
    cpu_count: int | None
    intra_op_threads: int
    gpu: JsonObject | None = optional()  # backend=trt


@dataclass
class LatencySettings:
    """``bench.*`` as the timings used them."""

    batch_sizes: list[int]
    warmup: int
    min_repeats: int
    repeats: int
    max_seconds: float
    feeds: int
    n_boot: int
    level: float


@dataclass
class NotFasterFlag:
    """An INT8 candidate not shown faster than FP16 at one batch size."""

    candidate: str
    batch_size: int
    ratio: VsFp16 = inline(required=True)


@dataclass
class CostFit:
    """Where the P99 budget is met: the batch's P99, the QPS interval of one instance and
    the instances the target QPS needs at both ends of it."""

    p99_ms: float
    qps_per_instance_ci: list[float]


@dataclass
class CostSaving:
    """Instances saved against FP32 (None when either does not fit the budget)."""

    instances_saved_vs_fp32: int | None
    saving_vs_fp32: float | None


@dataclass(kw_only=True)
class CostRow:
    """One candidate's cost projection: the largest batch whose P99 fits the budget, the
    QPS of one instance there, the instances the target QPS needs, the saving vs FP32."""

    target_qps: float
    p99_budget_ms: float
    fits_budget: bool
    batch_size: int | None
    fit: CostFit | None = inline()
    qps_per_instance: float | None
    instances: int | None
    instances_range: list[int] | None = optional()
    reason: str | None = optional()  # why no batch fits
    saving: CostSaving | None = inline()
    saving_note: str | None = optional()


@dataclass
class CostProjection:
    """``latency.cost``: target QPS, P99 budget, a row per candidate, the method."""

    target_qps: float
    p99_budget_ms: float
    per_candidate: dict[str, CostRow]
    method: str


@dataclass
class ExecutionLabel:
    """What the timings belong to (bench/stage.py: execution_label): backend, providers,
    execution, device, target, host and the caveat on reading them."""

    backend: str
    providers: list[str]
    execution: str
    device: str
    target: str | JsonObject
    host: HostLabel
    caveat: str


@dataclass
class LatencyRecord:
    """``record.latency``: where and how the timings were taken (backend, providers, device,
    host), what was measured and skipped, the feeds' shapes, the settings, INT8 candidates
    not faster than FP16 and the cost projection."""

    label: ExecutionLabel = inline(required=True)
    measured: list[str]
    skipped: dict[str, str]
    skipped_batches: dict[str, str]
    inputs: dict[str, list[dict[str, list[int]]]]
    settings: LatencySettings
    int8_not_faster: list[NotFasterFlag]
    cost: CostProjection
    seconds: float
