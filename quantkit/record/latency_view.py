"""Latency of the record: a candidate's timings per batch size, and the run's latency section
(what the timings belong to: backend, device, host, method; the cost projection)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, seq, view_to_dict

__all__ = ["CostRow", "CostView", "LatencySection", "LatencyStats", "NotFasterFlag", "VsFp16"]


@dataclass(frozen=True)
class VsFp16(FlatView):
    """An INT8 candidate's latency against FP16 at one batch size."""

    median_ratio_vs_fp16: Any = None
    median_ratio_vs_fp16_ci: Any = None
    int8_not_faster: Any = None
    status: Any = None


@dataclass(frozen=True)
class LatencyStats:
    """One candidate at one batch size: percentiles, throughput (each with its interval)."""

    p50_ms: Any = None
    p50_ms_ci: Any = None
    p90_ms: Any = None
    p90_ms_ci: Any = None
    p99_ms: Any = None
    p99_ms_ci: Any = None
    throughput: Any = None
    throughput_ci: Any = None
    n: Any = None
    vs_fp16: VsFp16 | None = None
    reused: Any = None
    measured_at: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> LatencyStats:
        d = mapping(d)
        vs = d.get("vs_fp16")
        return cls(**{k: d.get(k) for k in ("p50_ms", "p50_ms_ci", "p90_ms", "p90_ms_ci",
                                              "p99_ms", "p99_ms_ci", "throughput",
                                              "throughput_ci", "n", "reused", "measured_at")},
                   vs_fp16=VsFp16.from_dict(vs) if isinstance(vs, Mapping) else None)

    def percentile(self, p: str) -> tuple[Any, Any]:
        """(value, interval) of percentile ``p`` ("p50", "p90", "p99") in ms."""
        return {"p50": (self.p50_ms, self.p50_ms_ci), "p90": (self.p90_ms, self.p90_ms_ci),
                "p99": (self.p99_ms, self.p99_ms_ci)}[p]

    @staticmethod
    def per_batch(d: Any) -> dict[str, LatencyStats] | None:
        """``candidate.latency`` (batch -> stats), None when not measured."""
        if not isinstance(d, Mapping):
            return None
        return {str(b): LatencyStats.from_dict(s) for b, s in d.items() if isinstance(s, Mapping)}

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class CostRow(FlatView):
    """The cost projection of one candidate: the batch that meets the P99 budget, instances."""

    batch_size: Any = None
    p99_ms: Any = None
    fits_budget: Any = None
    qps_per_instance: Any = None
    instances: Any = None
    instances_range: Any = None
    saving_vs_fp32: Any = None
    instances_saved_vs_fp32: Any = None
    reason: Any = None


@dataclass(frozen=True)
class CostView:
    """``latency.cost``: target QPS, P99 budget, method, a row per candidate."""

    target_qps: Any = None
    p99_budget_ms: Any = None
    method: Any = None
    per_candidate: dict[str, CostRow] = field(default_factory=dict)

    def row(self, name: str) -> CostRow | None:
        """Candidate ``name``'s row, None when it has none."""
        return self.per_candidate[name] if name in self.per_candidate else None

    @classmethod
    def from_dict(cls, d: Any) -> CostView:
        d = mapping(d)
        return cls(target_qps=d.get("target_qps"), p99_budget_ms=d.get("p99_budget_ms"),
                   method=d.get("method"),
                   per_candidate={str(n): CostRow.from_dict(c)
                                  for n, c in mapping(d.get("per_candidate")).items()
                                  if isinstance(c, Mapping)})

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class NotFasterFlag(FlatView):
    """An INT8 candidate not faster than FP16 at one batch size."""

    candidate: Any = None
    batch_size: Any = None
    median_ratio_vs_fp16: Any = None
    status: Any = None


_SETTINGS = ("level", "warmup", "repeats", "max_seconds", "min_repeats", "feeds", "n_boot")
_HOST = ("cpu", "cpu_count", "intra_op_threads")


@dataclass(frozen=True)
class LatencySection:
    """``record.latency``: where and how the timings were taken, and the cost projection."""

    execution: Any = None
    device: Any = None
    backend: Any = None
    providers: Any = None
    target: Any = None
    caveat: Any = None
    host: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: dict[str, Any] = field(default_factory=dict)
    skipped_batches: dict[str, Any] = field(default_factory=dict)
    int8_not_faster: list[NotFasterFlag] = field(default_factory=list)
    cost: CostView | None = None

    @classmethod
    def from_dict(cls, d: Any) -> LatencySection:
        d = mapping(d)
        host, st = mapping(d.get("host")), mapping(d.get("settings"))
        inputs = {}
        for b, shapes in mapping(d.get("inputs")).items():
            feeds = shapes if isinstance(shapes, list) else [shapes]
            inputs[str(b)] = [dict(f) for f in feeds if isinstance(f, Mapping) and f]
        cost = d.get("cost")
        return cls(execution=d.get("execution"), device=d.get("device"), backend=d.get("backend"),
                   providers=d.get("providers"), target=d.get("target"), caveat=d.get("caveat"),
                   host={k: host.get(k) for k in _HOST}, settings={k: st.get(k) for k in _SETTINGS},
                   inputs=inputs, skipped=mapping(d.get("skipped")),
                   skipped_batches=mapping(d.get("skipped_batches")),
                   int8_not_faster=[NotFasterFlag.from_dict(f)
                                    for f in seq(d.get("int8_not_faster"))
                                    if isinstance(f, Mapping)],
                   cost=CostView.from_dict(cost) if isinstance(cost, Mapping) and cost else None)

    @classmethod
    def parse(cls, d: Any) -> LatencySection | None:
        """The section of a non-empty recorded mapping, else None (latency not measured)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)
