"""The latency stage: time every candidate artifact on the run's backend at the configured
batch sizes, summarise, flag INT8 that is not faster than FP16, project the serving cost.

    res = measure_latency(settings, {"fp32": "model.onnx", "int8.mse": "model.int8.mse.onnx"},
                          make_feeds)            # make_feeds(batch_size) -> iterable of feeds
    record.candidates[name]["latency"] = res["candidates"][name]   # batch -> stats
    record.latency = res["summary"]                                # what the numbers belong to

Latency is volatile: the record keeps it under ``latency`` keys only, which determinism
checks leave out. Only a ``reuse=`` hook (the run's stage cache) may return an earlier
measurement of the same artifact, feeds, host and settings.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np

from quantkit.backends.engine_meta import EngineFile
from quantkit.bench.latency_stats import compare_int8_fp16, cost_projection, latency_stats
from quantkit.bench.timing import time_runner

__all__ = ["measure_latency", "execution_label", "latency_key_facts", "default_runner", "feeds_digest"]

log = logging.getLogger(__name__)

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def _short(provider: str) -> str:
    return provider.replace("ExecutionProvider", "")


def execution_label(settings, *, gpu: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Which backend, provider, device and host the latency numbers belong to, and the caveat.

    ``gpu``: :func:`quantkit.backends.trt.gpu_environment` of ``backend.trt.device`` (TensorRT
    version, GPU name, compute capability, driver and CUDA versions), put in ``host["gpu"]``
    on ``backend=trt`` (queried here when not given).
    """
    from quantkit.environment import cpu_name

    b = settings.backend
    target = getattr(settings, "target", None)
    if is_dataclass(target):
        target = asdict(target)
    host = {"cpu": cpu_name(), "cpu_count": os.cpu_count(), "intra_op_threads": b.intra_op_threads}
    if b.name == "trt":
        if gpu is None:
            from quantkit.backends.trt import gpu_environment

            gpu = gpu_environment(b.trt.device)
        host["gpu"] = dict(gpu)
        execution = "TensorRT engine (strongly typed, built by quantkit)"
        device = "GPU"
        caveat = (f"TensorRT {gpu.get('tensorrt')} engines built from the artifacts on "
                  f"{gpu.get('name')} (sm {gpu.get('compute_capability')}): valid for this GPU "
                  "and TensorRT version only; GPU compute time from CUDA events on device-"
                  "resident inputs, host copies reported apart")
        providers: list[str] = []
    else:
        providers = list(b.providers)
        execution = "ONNX Runtime " + "+".join(_short(p) for p in providers)
        gpu_eps = [p for p in providers if p in GPU_PROVIDERS]
        device = "GPU" if gpu_eps else "CPU"
        if "TensorrtExecutionProvider" in gpu_eps:
            caveat = ("ONNX Runtime's TensorRT execution provider builds its own engines with the "
                      "provider options shown: close to, but not the same as, a strongly typed "
                      "TensorRT engine built by quantkit (backend=trt)")
        elif gpu_eps:
            caveat = "ONNX Runtime CUDA kernels on a GPU: not a prediction of TensorRT latency"
        elif target == "ort_cpu":
            caveat = (f"ONNX Runtime on this host's CPU ({host['cpu']}, {host['cpu_count']} cores): "
                      "the target runtime, but another CPU (cores, ISA, load) gives other numbers")
        else:
            caveat = (f"ONNX Runtime on this host's CPU ({host['cpu']}, {host['cpu_count']} cores): "
                      "compares the candidates on this CPU only; NOT a prediction of TensorRT "
                      "latency on a GPU. Run backend=trt on the target GPU for deployment numbers")
    return {"backend": b.name, "providers": providers, "execution": execution, "device": device,
            "target": target, "host": host, "caveat": caveat}


def latency_key_facts(settings, environment: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a cached latency measurement depends on besides the artifact and the feeds:
    the timing settings, the backend settings, the target, the seed and ``environment``
    (:func:`quantkit.environment.execution_environment` of the backend: CPU model and ISA, ONNX
    Runtime version and, on ``backend=trt``, TensorRT version, GPU name, compute capability,
    driver and CUDA versions). Another GPU or TensorRT version gives another key."""
    b = settings.bench
    timing = {k: v for k, v in asdict(b).items()
              if k not in ("target_qps", "p99_budget_ms", "candidates", "enabled", "remeasure")}
    backend = {k: v for k, v in asdict(settings.backend).items() if k != "batch_size"}
    target = getattr(settings, "target", None)
    return {"timing": timing, "backend": backend, "target": target, "seed": settings.seed,
            "environment": dict(environment)}


def default_runner(settings, name: str, model):
    """A Runner for one candidate: a TensorRT engine (an :class:`EngineFile`) or an ONNX
    model (path or proto) on ONNX Runtime with the run's providers and options."""
    if isinstance(model, EngineFile):
        from quantkit.backends.trt import TrtRunner

        return TrtRunner(model.path, name=f"bench-{name}", device=settings.backend.trt.device)
    from quantkit.backends.runners import ort_runner

    return ort_runner(settings.backend, model, name=f"bench-{name}")


def _time(settings, runner, feeds):
    """GPU compute time with CUDA events where the runner stages device-resident inputs
    (TensorRT); wall time of ``infer`` otherwise (ONNX Runtime)."""
    cfg = settings.bench
    kwargs = dict(warmup=cfg.warmup, min_repeats=cfg.min_repeats, max_repeats=cfg.repeats,
                  max_seconds=cfg.max_seconds)
    if callable(getattr(runner, "stage", None)) and callable(getattr(runner, "launch", None)):
        from quantkit.bench.gpu_timing import time_on_device

        return time_on_device(runner, feeds, cuda_graphs=settings.backend.trt.cuda_graphs, **kwargs)
    return time_runner(runner.infer, feeds, **kwargs)


def _take_feeds(make_feeds: Callable[[int], Iterable[Mapping[str, np.ndarray]]], batch: int,
                count: int) -> list[dict[str, np.ndarray]]:
    feeds = []
    for feed in itertools.islice(make_feeds(batch), count):
        first = next(iter(feed.values()))
        if first.shape and first.shape[0] == batch:
            feeds.append(dict(feed))
    return feeds


def _is_int8(name: str) -> bool:
    return name.startswith("int8.") or name == "mixed"


def feeds_digest(feeds_by_batch: Mapping[int, list[Mapping[str, np.ndarray]]]) -> str:
    """sha256 over every timed feed (names, dtypes, shapes, bytes), in order."""
    h = hashlib.sha256()
    for b in sorted(feeds_by_batch):
        h.update(f"batch {b}\n".encode())
        for feed in feeds_by_batch[b]:
            for k in sorted(feed):
                a = np.ascontiguousarray(feed[k])
                h.update(f"{k} {a.dtype.str} {a.shape}\n".encode())
                h.update(a.tobytes())
    return h.hexdigest()


def measure_latency(settings, candidates: Mapping[str, Any],
                    make_feeds: Callable[[int], Iterable[Mapping[str, np.ndarray]]], *,
                    make_runner: Callable[[Any, str, Any], Any] | None = None,
                    reuse: Callable[..., tuple[dict, dict]] | None = None) -> dict[str, Any]:
    """Time ``candidates`` (name -> ONNX path / proto, or an :class:`EngineFile`).

    Returns ``{"candidates": {name: {"<batch>": stats}}, "summary": {...}}``: JSON-able.
    One runner is open at a time; feeds are the same for every candidate (paired inputs).

    ``reuse(name, feeds_sha256, measure) -> (raw, stats)``, when given, may return an
    earlier measurement of the same artifact on the same feeds, host and settings instead
    of calling ``measure() -> (raw, stats)`` (the run's stage cache does this; a reused
    measurement says when it was taken).
    """
    cfg = settings.bench
    make_runner = make_runner or default_runner
    wanted = list(cfg.candidates) or list(candidates)
    skipped = {n: "not among this run's candidates" for n in wanted if n not in candidates}
    names = [n for n in wanted if n in candidates]
    for n, why in skipped.items():
        log.warning("latency: bench.candidates names %s: %s", n, why)

    feeds_by_batch: dict[int, list[dict]] = {}
    inputs: dict[str, list[dict[str, list[int]]]] = {}  # batch -> shapes of each feed
    skipped_batches: dict[str, str] = {}
    for b in cfg.batch_sizes:
        feeds = _take_feeds(make_feeds, b, cfg.feeds)
        if not feeds:
            skipped_batches[str(b)] = f"no full batch of {b} examples to time"
            log.warning("latency: batch %d skipped: %s", b, skipped_batches[str(b)])
            continue
        feeds_by_batch[b] = feeds
        inputs[str(b)] = [{k: list(v.shape) for k, v in f.items()} for f in feeds]

    raw: dict[str, dict[int, np.ndarray]] = {}
    per_cand: dict[str, dict[str, dict]] = {}
    t_stage = time.perf_counter()
    digest = feeds_digest(feeds_by_batch)

    def measure(name: str) -> tuple[dict[int, np.ndarray], dict[str, dict]]:
        r, per = {}, {}
        with make_runner(settings, name, candidates[name]) as runner:
            for b, feeds in feeds_by_batch.items():
                t = _time(settings, runner, feeds)
                r[b] = t.latencies_ms
                s = latency_stats(t.latencies_ms, b, n_boot=cfg.n_boot, seed=settings.seed,
                                  level=cfg.level)
                s.update({"warmup": t.warmup, "stopped": t.stopped,
                          "timed_seconds": round(t.seconds, 3), "feeds": len(feeds)})
                if getattr(t, "h2d_ms", None) is not None:  # GPU: compute time vs host copies
                    s.update({"timed": "GPU compute (CUDA events, device-resident inputs)",
                              "cuda_graphs": t.cuda_graphs,
                              "h2d_ms_mean": float(np.mean(t.h2d_ms)),
                              "d2h_ms_mean": float(np.mean(t.d2h_ms))})
                per[str(b)] = s
        return r, per

    for name in names:
        if reuse is None:
            raw[name], per_cand[name] = measure(name)
        else:
            raw[name], per_cand[name] = reuse(name, digest, lambda n=name: measure(n))
        for b, s in per_cand[name].items():
            log.info("latency %s batch %s: p50 %.3f ms p99 %.3f ms, %.1f samples/s (n=%d)%s",
                     name, b, s["p50_ms"], s["p99_ms"], s["throughput"], s["n"],
                     f" (measured {s['measured_at']}, reused)" if s.get("reused") else "")

    flags = []
    if "fp16" in raw:
        for name in names:
            if not _is_int8(name):
                continue
            for b in feeds_by_batch:
                c = compare_int8_fp16(raw[name][b], raw["fp16"][b], n_boot=cfg.n_boot,
                                      seed=settings.seed, level=cfg.level)
                per_cand[name][str(b)]["vs_fp16"] = c
                if c["int8_not_faster"]:
                    flags.append({"candidate": name, "batch_size": b, **c})
                    log.warning("latency: %s is not faster than fp16 at batch %d (median ratio "
                                "%.2f [%.2f, %.2f])", name, b, c["median_ratio_vs_fp16"],
                                *c["median_ratio_vs_fp16_ci"])

    projections: dict[str, dict] = {}
    ref = None
    if "fp32" in per_cand and per_cand["fp32"]:
        ref = cost_projection({int(k): v for k, v in per_cand["fp32"].items()},
                              target_qps=cfg.target_qps, p99_budget_ms=cfg.p99_budget_ms)
    for name in names:
        if not per_cand[name]:
            continue
        projections[name] = cost_projection({int(k): v for k, v in per_cand[name].items()},
                                            target_qps=cfg.target_qps,
                                            p99_budget_ms=cfg.p99_budget_ms, reference=ref)
        if name == "fp32":
            projections[name].update({"instances_saved_vs_fp32": 0 if ref and ref["instances"]
                                      else None,
                                      "saving_vs_fp32": 0.0 if ref and ref["instances"] else None})

    summary = execution_label(settings)
    summary.update({
        "measured": names,
        "skipped": skipped,
        "skipped_batches": skipped_batches,
        "inputs": inputs,
        "settings": {"batch_sizes": list(cfg.batch_sizes), "warmup": cfg.warmup,
                     "min_repeats": cfg.min_repeats, "repeats": cfg.repeats,
                     "max_seconds": cfg.max_seconds, "feeds": cfg.feeds, "n_boot": cfg.n_boot,
                     "level": cfg.level},
        "int8_not_faster": flags,
        "cost": {"target_qps": cfg.target_qps, "p99_budget_ms": cfg.p99_budget_ms,
                 "per_candidate": projections,
                 "method": ("each instance runs the largest measured batch size whose P99 batch "
                            "latency fits the budget; QPS per instance = its throughput; instances "
                            "= ceil(target QPS / QPS per instance); queueing while a batch fills "
                            "is not modelled")},
        "seconds": round(time.perf_counter() - t_stage, 3),
    })
    return {"candidates": per_cand, "summary": summary}
