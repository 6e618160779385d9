"""Stage "latency": every candidate timed on the run's backend (bench/stage.py), reusing this
host's earlier measurement of the same artifact through the stage cache."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import onnxruntime

from quantkit.bench import measure_latency
from quantkit.bench.stage import execution_label
from quantkit.data.feeds import batch_size_for
from quantkit.record.latency import LatencyRecord, LatencyStats
from quantkit.record.serde import decode, encode
from quantkit.run.context import RunContext

__all__ = ["LatencyReport", "latency", "latency_feeds", "latency_reuse"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LatencyReport:
    """``candidates``: name -> batch -> stats; ``summary``: what the numbers belong to, cost."""

    candidates: dict[str, dict]
    summary: dict

    def to_record(self) -> LatencyRecord:
        return decode(LatencyRecord, encode(self.summary), "latency")

    def candidate_record(self, name: str) -> dict[str, LatencyStats]:
        """Candidate ``name``'s timings per batch size, as its record entry keeps them."""
        return decode(dict[str, LatencyStats], encode(self.candidates[name]),
                      f"candidates.{name}.latency")


def latency_feeds(ctx: RunContext, batch_size: int):
    """Feeds for the latency stage: batches of ``batch_size`` from the head of the eval split
    (``bench.feeds`` of them, the same for every candidate)."""
    n = batch_size * ctx.settings.bench.feeds
    return ctx.batches(ctx.head(ctx.splits.dev, n), batch_size)


def latency_reuse(ctx: RunContext, shas: dict[str, str]):
    """The latency stage's cache hook: one timing per (artifact, feeds, host, settings).

    A warm rerun or a sibling sweep job reuses this host's measurement of the same artifact
    instead of timing it again; each reused entry carries ``measured_at`` and ``reused``.
    ``bench.remeasure=true`` always times afresh (and refreshes the cache).
    """
    s = ctx.settings
    label = execution_label(s)
    b = s.bench
    timing = {k: v for k, v in dataclasses.asdict(b).items()
              if k not in ("target_qps", "p99_budget_ms", "candidates", "enabled", "remeasure")}
    backend = {k: v for k, v in dataclasses.asdict(s.backend).items() if k != "batch_size"}

    def reuse(name: str, feeds_sha: str, measure):
        def compute():
            raw, per = measure()
            at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            for st in per.values():
                st["measured_at"] = at
            return {"per": per}, {f"b{k}": v for k, v in raw.items()}

        inputs = {"artifact": shas.get(name, name), "feeds": feeds_sha, "timing": timing,
                  "backend": backend, "host": label["host"], "target": label["target"],
                  "onnxruntime": onnxruntime.__version__, "seed": s.seed, **ctx.measured_key()}
        if b.remeasure:
            ctx.invalidate("latency", inputs)
        obj, arrays, hit = ctx.cached("latency", inputs, compute)
        per = obj["per"]
        for st in per.values():
            st["reused"] = bool(hit)
        return {int(k[1:]): v for k, v in arrays.items()}, per

    return reuse


def latency(ctx: RunContext, models: dict[str, object], shas: dict[str, str]) -> LatencyReport:
    """Time ``models`` (name -> ONNX path, or the :class:`EngineFile` of a TensorRT engine)
    at ``bench.batch_sizes``; at batch 1 only where the model fixes its batch at 1."""
    s = ctx.settings
    if batch_size_for(ctx.prepared_feeds(), 2) == 1 and list(s.bench.batch_sizes) != [1]:
        log.info("latency at batch 1 only: the model's batch is fixed at 1 (bench.batch_sizes "
                 "%s not measurable)", list(s.bench.batch_sizes))
        s = dataclasses.replace(s, bench=dataclasses.replace(s.bench, batch_sizes=[1]))
        ctx = dataclasses.replace(ctx, settings=s)
    lat = measure_latency(s, models, lambda b: latency_feeds(ctx, b),
                          reuse=latency_reuse(ctx, shas))
    return LatencyReport(candidates=lat["candidates"], summary=lat["summary"])
