"""One run: the only module that knows the stage order and writes artifacts (DESIGN.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from omegaconf import DictConfig, OmegaConf

from quantkit.assets import cache_root, sha256_file
from quantkit.report.record import RunRecord
from quantkit.compare.metrics import first_diverging, flag_layers
from quantkit.models.base import write_json_atomic, write_model_atomic
from quantkit.qdq.graph import ensure_node_names
from quantkit.settings import Settings, build

log = logging.getLogger(__name__)


class _Stages:
    """Times each stage into the record and logs it."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    @contextlib.contextmanager
    def __call__(self, name: str):
        log.info("stage %s ...", name)
        t0 = time.perf_counter()
        info: dict = {}
        yield info
        info["seconds"] = round(time.perf_counter() - t0, 3)
        self.record.stages[name] = info
        log.info("stage %s done in %.1f s", name, info["seconds"])


def _run_dir(cfg: DictConfig, out_dir: str | Path | None) -> Path:
    if out_dir is not None:
        return Path(out_dir)
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise RuntimeError("run() outside Hydra needs out_dir")


def _command() -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            overrides = list(HydraConfig.get().overrides.task)
            return "python -m quantkit " + " ".join(shlex.quote(o) for o in overrides)
    except Exception:  # pragma: no cover - only for odd Hydra states
        pass
    return " ".join(shlex.quote(a) for a in sys.argv)


def run(cfg: DictConfig, *, out_dir: str | Path | None = None) -> RunRecord:
    settings: Settings = build(cfg)
    run_dir = _run_dir(cfg, out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = cache_root(settings.cache_dir)
    record = RunRecord(experiment=settings.experiment_name, run_dir=str(run_dir),
                       command=_command(), seed=settings.seed,
                       config=OmegaConf.to_container(cfg, resolve=True),
                       started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    stage = _Stages(record)
    record.notes.append(target_note(settings))
    global _CACHE
    from quantkit.cache import StageCache

    _CACHE = StageCache(Path(settings.stage_cache_dir).expanduser() if settings.stage_cache_dir
                        else cache_dir / "stages", enabled=settings.stage_cache)
    from quantkit.fsutil import ensure_dir  # fail fast: one clear error per unwritable dir

    ensure_dir(cache_dir, key="cache_dir")
    if settings.stage_cache:
        ensure_dir(_CACHE.root, key="stage_cache_dir" if settings.stage_cache_dir else "cache_dir")
    if settings.backend.name == "trt":  # fail fast: one clear error where tensorrt is missing
        from quantkit.backends.trt import require_cuda_runtime, require_tensorrt

        require_tensorrt()
        require_cuda_runtime()
    else:  # an execution provider this onnxruntime lacks: one clear error, before any work
        from quantkit.backends.ort import check_providers

        check_providers(settings.backend.providers)
    if settings.model.kind == "onnx":  # fail fast, before any data work
        from quantkit.models.base import inspect_onnx

        inspect_onnx(settings.model.path, output=settings.model.output)

    from quantkit.data import load_splits
    from quantkit.models import prepare_model

    with stage("data"):
        splits = load_splits(settings, cache_dir=cache_dir)
        record.data = {"name": settings.data.name, "source": settings.data.source,
                       "sizes": splits.sizes(), "sha256": splits.hashes(),
                       "label_names": splits.label_names}
        if settings.data.kind != "text":  # text records keep their original keys
            record.data["kind"] = settings.data.kind
    with stage("model") as info:
        model = prepare_model(settings, splits, cache_dir=cache_dir)
        info["cached"] = model.cached
        record.model = model.to_dict()

    with stage("fp32_reference"):
        enc = make_feeds(settings, model)  # TextFeeds | ImageFeeds: every stage's batches
        eval_lengths = enc.lengths(splits.eval)  # token counts (text) or None (images)
        if enc.kind != "text":
            record.data["feeds"] = enc.describe()
        ref = evaluate_candidate(settings, "fp32", model.path, model, splits, enc, eval_lengths,
                                 artifact_sha=model.sha256)
        record.candidates["fp32"] = ref["evidence"]

    proto = onnx.load(model.path)
    ensure_node_names(proto)
    with stage("calibration") as info:
        cal = calibrate(settings, proto, splits, enc, run_dir)
        info.update(cal["info"])
        record.calibration = cal["record"]
    with stage("fp16_range_check") as info:
        overflow = fp16_overflow(settings, proto, splits, enc)
        info["fp32_nodes"] = len(overflow)

    artifacts: dict[str, dict] = {}
    with stage("artifacts") as info:
        artifacts["fp16"] = build_artifact(settings, proto, run_dir, "fp16", ranges=None,
                                           overflow=overflow)
        for method, rng in cal["ranges"].items():
            artifacts[f"int8.{method}"] = build_artifact(settings, proto, run_dir, f"int8.{method}",
                                                         ranges=rng, overflow=overflow)
        info["count"] = len(artifacts)

    with stage("evaluate") as info:
        for name, art in artifacts.items():
            res = evaluate_candidate(settings, name, art["path"], model, splits, enc, eval_lengths,
                                     reference=ref, plan_int8=art["plan"].int8_nodes(),
                                     emulated=art["emulated"], artifact_sha=art["sha256"])
            ev = res["evidence"]
            ev.update({"plan_counts": art["plan_counts"], "lint": art["lint"],
                       "artifact_sha256": art["sha256"]})
            record.candidates[name] = ev
        info["candidates"] = len(artifacts)

    with stage("backend_check"):
        for name, art in artifacts.items():
            if settings.backend.name == "ort":
                record.candidates[name]["backend_check"] = backend_check(
                    settings, art, model, splits, enc, eval_lengths)

    with stage("layerwise") as info:
        order = artifacts["fp16"]["compare_tensors"]
        sub = list(range(min(settings.compare.subset, len(splits.eval))))
        layers = layerwise(settings, model, artifacts, order, splits, enc, sub)
        info["examples"] = len(sub)
        floor = layers.pop("fp16")
        producers = {o: n.name for n in proto.graph.node for o in n.output}
        record.candidates["fp16"]["layers"] = floor
        for name, per in layers.items():
            cand = record.candidates[name]
            cand["layers"] = per
            kw = dict(order=[t for t in order if t in per],
                      floor_multiple=settings.compare.floor_multiple)
            cand["flagged_layers"] = [f for f in flag_layers(per, floor, **kw) if f.get("flagged")]
            tensor = first_diverging(per, floor, **kw)
            cand["first_diverging"] = tensor
            cand["first_diverging_node"] = producers.get(tensor) if tensor else None

    skip = search_skip_reason(settings) if settings.precision.search.enabled else None
    if skip:
        log.info("precision search skipped: %s", skip)
        record.search = {"skipped": skip}
    elif settings.precision.search.enabled and len(artifacts) > 1:
        with stage("search") as info:
            mixed = search_mixed(settings, proto, artifacts, record, model, splits, enc,
                                 eval_lengths, ref, run_dir)
            if mixed is not None:
                artifacts["mixed"] = mixed["artifact"]
                record.candidates["mixed"] = mixed["evidence"]
                record.search = mixed["search"]
                info.update({"full_evals": mixed["search"]["full_evals"],
                             "bound": mixed["search"]["bound"]})

    if settings.bench.enabled:
        with stage("latency") as info:  # timings: reused only for the same artifact and host
            from quantkit.bench import measure_latency

            models = {"fp32": model.path, **{n: a["path"] for n, a in artifacts.items()}}
            shas = {"fp32": model.sha256, **{n: a["sha256"] for n, a in artifacts.items()}}
            lat = measure_latency(settings, {n: record.candidates[n].get("engine") or m
                                             for n, m in models.items()},  # engine on backend=trt
                                  lambda b: latency_feeds(settings, enc, splits, b),
                                  reuse=latency_reuse(settings, shas))
            for name, per_batch in lat["candidates"].items():
                record.candidates[name]["latency"] = per_batch
            record.latency = lat["summary"]
            info["candidates"] = len(lat["candidates"])

    record.recommended = recommend(record.candidates)
    slow = slower_than_fp32(record.candidates, record.recommended)
    if slow:
        log.warning(slow)
        record.notes.append(slow)
    record.artifacts = {Path(a["path"]).name: a["sha256"] for a in artifacts.values()}
    for sub in ("ranges", "plans"):
        for f in sorted((run_dir / sub).glob("*")):
            record.artifacts[f"{sub}/{f.name}"] = sha256_file(f)
    write_sha256sums(run_dir, record.artifacts)
    record.stage_cache = _CACHE.stats()
    record.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write(run_dir / "record.json")
    log.info("record written to %s", run_dir / "record.json")
    with stage("report"):
        from quantkit.report.render import render_reports

        paths = render_reports(record.to_dict(), run_dir, formats=settings.report.formats)
        record.notes.append("reports: " + ", ".join(str(p) for p in paths.values()))
    return record


_CACHE = None  # quantkit.cache.StageCache | None  # set per run in run(); stages read it through cached()


def cached(stage: str, inputs: dict, compute):
    """``compute() -> (json_obj, arrays)`` once per content key; later runs load the entry.

    The key hashes ``inputs`` (upstream hashes and the settings that matter); a corrupted
    entry is detected by the cache's per-file sha256 and recomputed.
    """
    from quantkit.cache import ARRAYS_NAME, JSON_NAME, save_arrays, stage_key
    from quantkit.fsutil import atomic_write_json

    cache = _CACHE
    if cache is None:
        obj, arrays = compute()
        return obj, arrays or {}, False

    def _compute(tmp: Path) -> None:
        obj, arrays = compute()
        atomic_write_json(tmp / JSON_NAME, obj, durable=False)
        if arrays:
            save_arrays(tmp / ARRAYS_NAME, arrays)

    entry, hit = cache.get_or_compute(stage, stage_key(stage, **inputs), _compute, inputs=inputs)
    obj = cache.load_json(entry)
    arrays = cache.load_arrays(entry) if (entry / ARRAYS_NAME).exists() else {}
    return obj, arrays, hit


def make_feeds(settings: Settings, model):
    """The model's feeds from the data settings: TextFeeds or ImageFeeds (data/feeds.py)."""
    from quantkit.data.feeds import make_feeds as _make

    return _make(settings, model)


def text_encoder(settings: Settings, model):
    """The bare TextEncoder of a text model (benchmarks); runs use :func:`make_feeds`."""
    from quantkit.data.text import TextEncoder, load_tokenizer

    if not model.tokenizer:
        from quantkit.errors import ConfigError

        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<directory with tokenizer.json or hub name>")
    return TextEncoder(load_tokenizer(model.tokenizer), max_length=settings.data.max_length,
                       input_names=model.input_names)


def _feeds(enc, data, batch_size: int, lengths=None):
    """Feed dicts of ``data`` (a split or its raw items) from ``enc`` (a Feeds or TextEncoder)."""
    from quantkit.data.feeds import as_feeds

    return as_feeds(enc).feeds(data, batch_size, lengths=lengths)


def latency_reuse(settings: Settings, shas: dict[str, str]):
    """The latency stage's cache hook: one timing per (artifact, feeds, host, settings).

    A warm rerun or a sibling sweep job reuses this host's measurement of the same artifact
    instead of timing it again; each reused entry carries ``measured_at`` and ``reused``.
    ``bench.remeasure=true`` always times afresh (and refreshes the cache).
    """
    import onnxruntime

    from quantkit.bench.stage import execution_label

    label = execution_label(settings)
    b = settings.bench
    timing = {k: v for k, v in dataclasses.asdict(b).items()
              if k not in ("target_qps", "p99_budget_ms", "candidates", "enabled", "remeasure")}
    backend = {k: v for k, v in dataclasses.asdict(settings.backend).items() if k != "batch_size"}

    def reuse(name: str, feeds_sha: str, measure):
        def compute():
            raw, per = measure()
            at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            for s in per.values():
                s["measured_at"] = at
            return {"per": per}, {f"b{k}": v for k, v in raw.items()}

        inputs = {"artifact": shas.get(name, name), "feeds": feeds_sha, "timing": timing,
                  "backend": backend, "host": label["host"], "target": label["target"],
                  "onnxruntime": onnxruntime.__version__, "seed": settings.seed}
        if b.remeasure and _CACHE is not None:
            from quantkit.cache import stage_key

            _CACHE.invalidate("latency", stage_key("latency", **inputs))
        obj, arrays, hit = cached("latency", inputs, compute)
        per = obj["per"]
        for s in per.values():
            s["reused"] = bool(hit)
        return {int(k[1:]): v for k, v in arrays.items()}, per

    return reuse


def latency_feeds(settings: Settings, enc, splits, batch_size: int):
    """Feeds for the latency stage: batches of ``batch_size`` from the head of the eval split
    (``bench.feeds`` of them, the same for every candidate)."""
    return _feeds(enc, _head(splits.eval, batch_size * settings.bench.feeds), batch_size)


def _head(split, n: int):
    """The first ``n`` examples of a split (the whole split when it is shorter)."""
    return split.subset(range(min(n, len(split))))


def _feeds_key(enc) -> dict:
    """What a stage-cache key needs about the feeds beyond the data hash (text: nothing)."""
    from quantkit.data.feeds import as_feeds

    return as_feeds(enc).cache_key()


def _ort(settings: Settings, model, *, name: str, extra_outputs=(), optimized_to=None,
         disable_unsafe: bool = True):
    from quantkit.backends.ort import OrtRunner

    return OrtRunner(model, name=name, providers=settings.backend.providers,
                     provider_options=settings.backend.provider_options,
                     disabled_optimizers=settings.backend.disabled_optimizers if disable_unsafe else (),
                     intra_op_threads=settings.backend.intra_op_threads,
                     extra_outputs=extra_outputs, save_optimized_to=optimized_to)


def calibrate(settings: Settings, proto: onnx.ModelProto, splits, enc, run_dir: Path) -> dict:
    """One streaming FP32 pass over the calibration split -> ranges for every calibrator."""
    from quantkit.calibrate import (activation_tensors, bootstrap_ranges, collect_stats,
                                    compute_ranges, make_calibrator, save_ranges, select_tensors,
                                    to_trt_calibration_cache)
    from quantkit.errors import CalibrationError

    p, c = settings.precision, settings.calibrator
    targets = select_tensors(proto, op_types=tuple(p.op_types), include_nodes=tuple(p.include_nodes),
                             exclude_nodes=tuple(p.exclude_nodes))
    tensors = activation_tensors(targets)
    tensors += [t for t in residual_inputs(settings, proto, tensors) if t not in set(tensors)]
    if not tensors:
        raise CalibrationError("no tensors in the quantization scope", where="precision.op_types",
                               value=list(p.op_types), fix="widen precision.op_types or "
                               "precision.include_nodes")
    if c.ranges_files:
        return load_saved_ranges(c.ranges_files, tensors, len(targets))
    chunks = 16 if c.bootstrap > 0 else None

    def collect():
        return collect_stats(proto, _feeds(enc, splits.calib, c.batch_size),
                             tensors, num_bins=c.num_bins, progress=settings.progress,
                             runner_factory=lambda m, outs: _ort(settings, m, name="calibrate",
                                                                 extra_outputs=outs),
                             num_chunks=chunks)

    if chunks:  # bootstrap keeps per-chunk statistics: not cached
        res = collect()
    else:
        res = cached_stats(settings, proto, splits, tensors, collect, feeds_key=_feeds_key(enc))
    params = {"percentile": {"percentile": c.percentile},
              "entropy": {"num_quant_bins": c.num_quant_bins}}
    cals = {m: make_calibrator(m, **params.get(m, {})) for m in c.methods}
    spread = bootstrap_ranges(res.chunk_stats, cals, num_resamples=c.bootstrap, seed=settings.seed) \
        if chunks else None
    ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen, spread=spread)
    files = {}
    for m, r in ranges.items():
        save_ranges(r, run_dir / "ranges" / f"{m}.json")
        files[m] = f"ranges/{m}.json"
        to_trt_calibration_cache(r, run_dir / "ranges" / f"{m}.trt_calib.cache")
    first = next(iter(ranges.values()))
    if first.excluded:
        log.info("calibration left %d tensors unquantized: %s", len(first.excluded),
                 "; ".join(f"{t}: {why}" for t, why in list(first.excluded.items())[:8]))
    record = {"tensors": len(tensors), "quant_nodes": len(targets), "samples": res.samples_seen,
              "methods": list(ranges), "excluded": first.excluded, "notes": first.notes,
              "amax": {m: r.amax for m, r in ranges.items()}, "files": files,
              "spread": {m: r.spread for m, r in ranges.items() if r.spread},
              "summary": first.summary, "seconds": round(res.seconds, 3)}
    return {"ranges": ranges, "record": record,
            "info": {"tensors": len(tensors), "samples": res.samples_seen,
                     "collect_seconds": round(res.seconds, 3)}}


def cached_stats(settings: Settings, proto, splits, tensors: list[str], collect, *,
                 feeds_key: dict | None = None):
    """Calibration histograms, cached without the calibrator choice: every calibrator (and
    every sweep job) reuses one pass."""
    from types import SimpleNamespace

    from quantkit.calibrate.stats import HistogramStats

    c = settings.calibrator
    inputs = {"model": _proto_digest(proto), "calib": splits.calib.sha256, "tensors": tensors,
              "num_bins": c.num_bins, "batch_size": c.batch_size,
              "max_length": settings.data.max_length, "backend": list(settings.backend.providers),
              **(feeds_key or {})}

    def compute():
        res = collect()
        return ({"stats": {t: st.to_dict() for t, st in res.stats.items()},
                 "samples_seen": res.samples_seen, "seconds": res.seconds}, None)

    obj, _, hit = cached("calibration_stats", inputs, compute)
    stats = {t: HistogramStats.from_dict(d) for t, d in obj["stats"].items()}
    return SimpleNamespace(stats=stats, samples_seen=obj["samples_seen"],
                           seconds=0.0 if hit else obj["seconds"], chunk_stats=None, cached=hit)


def _proto_digest(proto: onnx.ModelProto) -> str:
    import hashlib

    return hashlib.sha256(proto.SerializeToString(deterministic=True)).hexdigest()


def residual_inputs(settings: Settings, proto: onnx.ModelProto, tensors: list[str]) -> list[str]:
    """Skip-branch inputs of residual Adds after INT8 Convs (TRT rule 6): calibrate them too,
    so Q/DQ on both Add inputs lets TensorRT fuse Conv + Add with INT8 I/O."""
    from quantkit.precision.plan import build_plan
    from quantkit.qdq.insert import residual_add_inputs

    if "Conv" not in settings.precision.op_types:
        return []
    p = settings.precision
    provisional = build_plan(proto, amax={t: 1.0 for t in tensors}, op_types=p.op_types,
                             include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                             remainder=p.remainder)
    if settings.target == "ort_cpu":  # + Conv / residual-Add outputs ORT fuses (qdq/targets.py)
        from quantkit.qdq.insert import ort_cpu_output_tensors

        return list(dict.fromkeys(residual_add_inputs(proto, provisional)
                                  + ort_cpu_output_tensors(proto, provisional)))
    return residual_add_inputs(proto, provisional)


def load_saved_ranges(files: list[str], tensors: list[str], n_nodes: int) -> dict:
    """Ranges from JSON files a previous run saved (``ranges/<calibrator>.json``)."""
    from quantkit.calibrate import check_ranges_match, load_ranges

    ranges, paths = {}, {}
    for f in files:
        r = load_ranges(f)
        check_ranges_match(r, tensors)
        if r.calibrator in ranges:
            from quantkit.errors import CalibrationError

            raise CalibrationError("two ranges files name the same calibrator",
                                   where="calibrator.ranges_files", value=r.calibrator,
                                   fix="list one ranges file per calibrator")
        ranges[r.calibrator] = r
        paths[r.calibrator] = f
    first = next(iter(ranges.values()))
    log.info("calibration skipped: ranges loaded from %s", ", ".join(files))
    record = {"tensors": len(tensors), "quant_nodes": n_nodes, "samples": first.samples_seen,
              "methods": list(ranges), "excluded": first.excluded, "notes": first.notes,
              "amax": {m: r.amax for m, r in ranges.items()}, "files": paths,
              "loaded_from": list(files), "summary": first.summary, "seconds": 0.0}
    return {"ranges": ranges, "record": record,
            "info": {"tensors": len(tensors), "loaded": len(files)}}


def fp16_overflow(settings: Settings, proto: onnx.ModelProto, splits, enc) -> dict[str, str]:
    """Nodes whose FP32 values exceed the FP16 range on a few calibration samples stay FP32."""
    n = settings.compare.fp16_range_samples
    inputs = {"model": _proto_digest(proto), "calib": splits.calib.sha256, "n": n,
              "max_length": settings.data.max_length, **_feeds_key(enc)}
    obj, _, _ = cached("fp16_range", inputs,
                       lambda: (_fp16_overflow(settings, proto, splits, enc), None))
    return obj


def _fp16_overflow(settings: Settings, proto: onnx.ModelProto, splits, enc) -> dict[str, str]:
    from quantkit.qdq.casts import fp16_overflow_nodes

    infos = {v.name: v.type.tensor_type.elem_type
             for v in onnx.shape_inference.infer_shapes(proto).graph.value_info}
    outs = [o for n in proto.graph.node for o in n.output
            if o and infos.get(o, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT]
    absmax: dict[str, float] = {}
    calib = _head(splits.calib, settings.compare.fp16_range_samples)
    with _ort(settings, proto, name="fp16-range", extra_outputs=outs) as r:
        for feed in _feeds(enc, calib, settings.data.batch_size):
            for t, v in r.infer(feed, outs).items():
                if v.dtype != np.float32 or v.size == 0:
                    continue
                finite = np.abs(v[np.isfinite(v)])
                m = float(finite.max()) if finite.size else 0.0
                absmax[t] = max(absmax.get(t, 0.0), m)
    return fp16_overflow_nodes(proto, absmax)


def build_artifact(settings: Settings, proto: onnx.ModelProto, run_dir: Path, name: str, *,
                   ranges, overflow: dict[str, str], plan=None) -> dict:
    """Plan -> Q/DQ (when INT8) -> FP16 casts -> lint -> model.<name>.onnx (atomic)."""
    from quantkit.calibrate.collect import select_tensors
    from quantkit.errors import GraphEditError
    from quantkit.precision.plan import build_plan
    from quantkit.qdq.casts import convert_fp16, emulate_fp16
    from quantkit.qdq.insert import insert_qdq
    from quantkit.qdq.lint import lint_for_target
    from quantkit.qdq.targets import activation_ranges, get_target

    p = settings.precision
    target = get_target(settings.target)
    if plan is None:
        plan = build_plan(proto, amax=ranges.amax if ranges else {},
                          excluded=ranges.excluded if ranges else {}, op_types=p.op_types,
                          include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                          force=dict(p.force), remainder=p.remainder,
                          fp32_nodes_reasons=overflow,
                          calibrator=ranges.calibrator if ranges else "")
        if ranges:  # signed min/max for asymmetric targets (ort_cpu); carried by the plan
            seen = activation_ranges(ranges.summary)
            plan = dataclasses.replace(plan, activation_range={
                t: seen[t] for t in plan.activation_amax if t in seen})
    nonfinite = set(ranges.excluded) if ranges else set()
    edited, qmap = (insert_qdq(proto, plan, target=target) if plan.int8_nodes()
                    else (proto, None))
    final = convert_fp16(edited, plan) if p.remainder == "fp16" else edited
    violations = lint_for_target(final, target.name, nonfinite_tensors=nonfinite)
    if violations:
        raise GraphEditError(f"{len(violations)} {target.lint} Q/DQ rule violations in {name}",
                             where=str(violations[0]), fix="report this as a bug")
    path = run_dir / f"model.{name}.onnx"
    sha = write_model_atomic(final, path)
    write_json_atomic(plan.to_dict(), run_dir / "plans" / f"{name}.json")
    if qmap is not None:
        write_json_atomic(qmap.to_dict(), run_dir / "plans" / f"{name}.qdqmap.json")
    scope = select_tensors(proto, op_types=tuple(p.op_types))
    compare_tensors = []
    for t in scope:
        compare_tensors.extend(t.activations)
        compare_tensors.extend(o for n in proto.graph.node if n.name == t.node for o in n.output)
    compare_tensors = list(dict.fromkeys(compare_tensors))
    return {"path": str(path), "sha256": sha, "plan": plan, "plan_counts": plan.counts(),
            "lint": {"violations": 0, "rules": target.lint}, "target": target.name,
            # built on first use: a run whose evaluations come from the stage cache never needs it
            "emulated": (Deferred(lambda: emulate_fp16(edited, plan))
                         if p.remainder == "fp16" and plan.nodes_with("fp16") else None),
            "activation_amax": dict(plan.activation_amax), "compare_tensors": compare_tensors}


class Deferred:
    """A value computed on the first call and kept (the function is dropped after)."""

    def __init__(self, fn) -> None:
        self._fn, self._value = fn, None

    def __call__(self):
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        return self._value


def _resolve(x):
    """A Deferred's value, or ``x`` itself."""
    return x() if isinstance(x, Deferred) else x


def evaluate_candidate(settings: Settings, name: str, path, model, splits, enc, lengths, *,
                       reference: dict | None = None, plan_int8: list[str] | None = None,
                       emulated: onnx.ModelProto | Deferred | None = None,
                       artifact_sha: str | None = None) -> dict:
    """Cached :func:`_evaluate`: keyed by the artifact's and the data's hashes and settings.

    ``artifact_sha``: the artifact file's sha256 when the caller knows it (else computed).
    """
    from dataclasses import asdict

    inputs = {"name": name, "artifact": artifact_sha or sha256_file(path), "model": model.sha256,
              "emulated": emulated is not None,
              "eval": splits.eval.sha256, "reference": reference is not None,
              "verdict": asdict(settings.verdict), "backend": asdict(settings.backend),
              "seed": settings.seed, "max_length": settings.data.max_length,
              "tokenizer": model.tokenizer, "plan_int8": plan_int8 or [], **_feeds_key(enc)}

    def compute():
        res = _evaluate(settings, name, path, model, splits, enc, lengths, reference=reference,
                        plan_int8=plan_int8, emulated=_resolve(emulated))
        return res["evidence"], {"logits": res["logits"]}

    evidence, arrays, hit = cached("evaluation", inputs, compute)
    return {"logits": arrays["logits"], "evidence": evidence}


def _evaluate(settings: Settings, name: str, path, model, splits, enc, lengths, *,
              reference: dict | None = None, plan_int8: list[str] | None = None,
              emulated: onnx.ModelProto | None = None) -> dict:
    """Task evidence of one artifact on the eval split (+ verdict against ``reference``).

    On ONNX Runtime CPU, FP16 ops without CPU kernels run in FP32 between Casts that ORT
    inserts and partly removes, which flatters FP16. When ``emulated`` is given (the same
    plan with FP16 rounding at every FP16 tensor and FP32 compute) task numbers come from it,
    and the artifact itself is only loaded for the kernel census. On TensorRT the engine
    built from the artifact is evaluated directly.
    """
    import tempfile

    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import kernel_census
    from quantkit.compare.task import agreement, mean_kl, slice_metrics, task_metrics
    from quantkit.data.feeds import as_feeds
    from quantkit.verdict import Margin, ab_verdict

    labels = list(range(len(splits.label_names)))
    y = splits.eval.labels
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "optimized.onnx"
        t0 = time.perf_counter()
        engine = build_trt_engine(settings, path, plan_int8) if settings.backend.name == "trt" else None
        use_emulation = engine is None and emulated is not None
        if use_emulation:
            with _ort(settings, path, name=f"{name}-census", optimized_to=optimized):
                pass
        runner = _trt_runner(engine, name) if engine else _ort(
            settings, emulated if use_emulation else path, name=name,
            optimized_to=None if use_emulation else optimized)
        with runner as r:
            logits = run_split(r, enc, splits.eval, output=model.output_name,
                               batch_size=settings.backend.batch_size, progress=settings.progress,
                               desc=f"eval {name}", lengths=lengths)
        seconds = time.perf_counter() - t0
        census = kernel_census(optimized) if optimized.exists() else {}
    pred = logits.argmax(axis=1)
    extra_slices = as_feeds(enc).slices(lengths)  # text: {"length": token-count buckets}
    ev = {"artifact": Path(path).name,
          "numerics": numerics_note(name, settings, emulated=engine is None and emulated is not None),
          "metrics": task_metrics(y, logits, labels=labels, label_names=splits.label_names),
          "slices": slice_metrics(y, pred, {"class": y, **extra_slices}),
          "eval_seconds": round(seconds, 3), "n": int(len(y)), "kernel_census": census,
          "backend": settings.backend.name}
    if engine is not None:
        ev["engine"] = engine
    if reference is not None:
        ref_logits = reference["logits"]
        ref_pred = ref_logits.argmax(axis=1)
        ev["agreement_fp32"] = agreement(ref_pred, pred)
        ev["mean_kl_fp32"] = mean_kl(ref_logits, logits)
        v = settings.verdict
        verdict = ab_verdict(y, ref_pred, pred, margin=Margin(v.margin_kind, v.margin),
                             alpha=v.alpha, metric=v.metric, n_boot=v.n_boot, seed=settings.seed,
                             slices={"class": np.array([splits.label_names[i] for i in y]),
                                     **extra_slices},
                             min_slice_n=v.min_slice_n, labels=labels)
        ev["verdict"] = verdict.to_dict()
    return {"logits": logits, "evidence": ev}


def build_trt_engine(settings: Settings, onnx_path, planned_int8: list[str] | None) -> dict:
    """Strongly typed TensorRT engine for one artifact (cached by ONNX, settings, TRT, GPU)."""
    from quantkit.assets import cache_root
    from quantkit.backends.trt import EngineSettings, build_engine, check_int8_layers

    t = settings.backend.trt
    cache = cache_root(settings.cache_dir) / "engines"
    es = EngineSettings(workspace_mb=t.workspace_mb, min_batch=t.min_batch, opt_batch=t.opt_batch,
                        max_batch=t.max_batch, min_sequence=t.min_sequence,
                        opt_sequence=t.opt_sequence, max_sequence=t.max_sequence,
                        timing_cache=t.timing_cache or str(cache / "timing.cache"),
                        builder_optimization_level=t.builder_optimization_level)
    art = build_engine(onnx_path, es, cache_dir=cache, rebuild=t.rebuild, device=t.device)
    out = {"engine_path": str(art.engine_path), "meta": art.meta.to_dict(),
           "cache_hit": art.cache_hit, "trtexec": art.trtexec,
           "layers_path": str(art.layers_path)}
    if planned_int8:
        out["int8_check"] = check_int8_layers(art.layers_path.read_text(), planned_int8)
    return out


def _trt_runner(engine: dict, name: str):
    from quantkit.backends.trt import TrtRunner

    return TrtRunner(engine["engine_path"], name=name)


def target_note(settings: Settings) -> str:
    """One line for the record: which deployment target the INT8 artifacts realize."""
    from quantkit.qdq.targets import get_target

    t = get_target(settings.target)
    note = f"target {t.name}: {t.description}"
    if t.forced_remainder:
        note += f"; precision.remainder forced to {t.forced_remainder}"
    if t.name == "ort_cpu":
        note += ("; every number of this run is on ONNX Runtime CPU, target ort_cpu, and "
                 "says nothing about TensorRT")
    return note


def numerics_note(name: str, settings: Settings, *, emulated: bool = False) -> str:
    if settings.backend.name == "trt":
        return (f"{name} artifact built into a strongly typed TensorRT engine (precision from "
                "the graph; no precision builder flags)")
    prov = "+".join(p.replace("ExecutionProvider", "") for p in settings.backend.providers)
    off = ",".join(settings.backend.disabled_optimizers) or "none"
    if name == "fp32":
        return f"FP32 on ONNX Runtime {prov}"
    rem = settings.precision.remainder.upper()
    what = "FP16 graph" if name == "fp16" else f"INT8 Q/DQ + {rem} remainder graph"
    if name == "fp16" and rem == "FP32":
        what = "FP32 graph (precision.remainder=fp32: this candidate has no FP16 node)"
    if settings.target != "tensorrt" and name != "fp16":
        what += (f" for target {settings.target} (numbers on ONNX Runtime CPU; not a "
                 "TensorRT prediction)")
    if emulated:
        return (f"{what}, FP16 emulated on ONNX Runtime {prov}: FP32 compute with FP16 rounding "
                f"at every FP16 tensor (ORT CPU lacks FP16 kernels); INT8 Q/DQ exact; disabled "
                f"optimizers: {off}. Kernel census from the artifact itself")
    return f"{what} on ONNX Runtime {prov} (disabled optimizers: {off})"


def backend_check(settings: Settings, art: dict, model, splits, enc, lengths) -> dict:
    from dataclasses import asdict

    inputs = {"artifact": art["sha256"], "eval": splits.eval.sha256,
              "compare": asdict(settings.compare), "backend": asdict(settings.backend),
              **_feeds_key(enc)}
    obj, _, _ = cached("backend_check", inputs,
                       lambda: (_backend_check(settings, art, model, splits, enc, lengths), None))
    return obj


def _backend_check(settings: Settings, art: dict, model, splits, enc, lengths) -> dict:
    """The artifact as the backend runs it vs its faithful emulation, on an eval subset.

    Agreement far below 1 (or a large accuracy gap) means the backend mis-ran the artifact
    (e.g. ORT 1.32's WeightBiasQuantization on FP16 Q/DQ graphs scored 0.25 instead of 0.82),
    so the emulated numbers, not the backend's, are the ones to trust.
    """
    from quantkit.backends.batched import run_split

    n = min(settings.compare.backend_check_subset, len(splits.eval))
    if n == 0 or art.get("emulated") is None:
        return {"checked": False}
    sub, y = _head(splits.eval, n), splits.eval.labels[:n]
    preds = {}
    for key, m in (("artifact", art["path"]), ("emulated", _resolve(art["emulated"]))):
        with _ort(settings, m, name=f"check-{key}") as r:
            preds[key] = run_split(r, enc, sub, output=model.output_name,
                                   batch_size=settings.backend.batch_size, progress=False,
                                   lengths=lengths[:n] if lengths is not None else None
                                   ).argmax(axis=1)
    agree = float((preds["artifact"] == preds["emulated"]).mean())
    acc = {k: float((v == y).mean()) for k, v in preds.items()}
    gap = abs(acc["artifact"] - acc["emulated"])
    ok = agree >= settings.compare.backend_check_min_agreement and \
        gap <= settings.compare.backend_check_max_accuracy_gap
    if not ok:
        log.warning("backend check: %s as ONNX Runtime runs it agrees with its FP16 emulation on "
                    "%.3f of %d examples (accuracy gap %.3f): the backend may mis-run this graph",
                    art["path"], agree, n, gap)
    return {"checked": True, "n": n, "agreement": agree, "accuracy": acc, "ok": ok,
            "compared": "artifact on the backend vs FP16 emulation of the same plan"}


def layerwise(settings: Settings, model, artifacts: dict[str, dict], tensors, splits, enc,
              subset) -> dict[str, dict[str, dict]]:
    """Per-layer stats of every artifact vs FP32 on an eval subset (a separate debug run)."""
    ref_path = model.path
    inputs = {"model": model.sha256, "artifacts": {n: a["sha256"] for n, a in artifacts.items()},
              "emulated": {n: a.get("emulated") is not None for n, a in artifacts.items()},
              "tensors": list(tensors), "eval": splits.eval.sha256, "subset": list(subset),
              "batch": settings.compare.batch_size,
              "amax": {n: a["activation_amax"] for n, a in artifacts.items()}, **_feeds_key(enc)}
    obj, _, _ = cached("layerwise", inputs, lambda: (
        _layerwise(settings, ref_path, artifacts, tensors, splits, enc, subset), None))
    return obj


def _layerwise(settings: Settings, ref_path, artifacts: dict[str, dict], tensors, splits, enc,
               subset) -> dict[str, dict[str, dict]]:
    import contextlib

    from quantkit.compare.layerwise import compare_layers, shared_tensors

    ref_proto = onnx.load(ref_path)
    data = splits.eval.subset(subset)
    with contextlib.ExitStack() as stack:
        runners, names = {}, {}
        for name, art in artifacts.items():
            cand_proto = (_resolve(art["emulated"]) if art.get("emulated") is not None
                          else onnx.load(art["path"]))
            names[name] = shared_tensors(ref_proto, cand_proto, tensors)
            runners[name] = stack.enter_context(
                _ort(settings, cand_proto, name=f"debug-{name}", extra_outputs=names[name]))
        union = list(dict.fromkeys(t for ts in names.values() for t in ts))
        ref = stack.enter_context(_ort(settings, ref_proto, name="debug-fp32", extra_outputs=union))
        return compare_layers(ref, runners, _feeds(enc, data, settings.compare.batch_size), names,
                              amax={n: a["activation_amax"] for n, a in artifacts.items()})


def measure_sensitivity(settings: Settings, proto, plan_for, top: list[str], ranking: list[str],
                        model, splits, enc, ref) -> tuple[dict, list[str]]:
    """Measured damage (mean KL vs FP32 on a small subset) when each top layer alone is FP16.

    Returns the scores and the new ranking: the measured top layers first (most sensitive
    first), then the rest in proxy order.
    """
    from quantkit.backends.batched import run_split
    from quantkit.compare.task import mean_kl
    from quantkit.precision.sensitivity import measured_scores, rank
    from quantkit.qdq.casts import emulate_fp16
    from quantkit.qdq.insert import insert_qdq

    n = min(settings.precision.search.subset, len(splits.eval))
    sub = _head(splits.eval, n)
    ref_logits = ref["logits"][:n]

    def damage(fp16: frozenset[str]) -> float:
        plan = plan_for(fp16)
        graph, _ = insert_qdq(proto, plan, target=settings.target)
        if settings.precision.remainder == "fp16":
            graph = emulate_fp16(graph, plan)
        with _ort(settings, graph, name="sensitivity") as r:
            logits = run_split(r, enc, sub, output=model.output_name,
                               batch_size=settings.backend.batch_size, progress=False)
        return float(mean_kl(ref_logits, logits))

    scores = measured_scores(damage, top, mode="restore")
    head = rank(dict(scores), order=top)
    return scores, head + [n for n in ranking if n not in set(head)]


def search_skip_reason(settings: Settings) -> str | None:
    """Why this run skips the sensitivity search, or None.

    A Hydra multirun job (``-m``) compares one setting against its siblings on full INT8;
    searching in every job would repeat the most expensive stage once per swept value. The
    search runs once, for the setting the sweep picks (``precision.search.in_sweeps=true``
    keeps it in every job).
    """
    if settings.precision.search.in_sweeps:
        return None
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
            return None
    except Exception:  # pragma: no cover - Hydra internals; a plain run searches
        return None
    return ("sweep job (python -m quantkit -m ...): the search runs once for the chosen "
            "setting; rerun it without -m, or set precision.search.in_sweeps=true")


def search_mixed(settings: Settings, proto, artifacts, record, model, splits, enc, lengths, ref,
                 run_dir: Path) -> dict | None:
    """Keep the fewest INT8 layers in FP16 that make the verdict PASS (issue: sensitivity).

    Ranking: the one-pass proxy from the full-INT8 per-layer comparison (free: it reuses the
    debug run). Search: galloping + bisection over the top-k of the ranking, each step one
    full evaluation with a verdict; the full-INT8 evaluation (k = 0) is reused.
    """
    import tempfile

    from quantkit.precision.search import EvalResult, linear_evals_needed, pareto, search_fp16_set
    from quantkit.precision.sensitivity import int8_node_tensors, proxy_scores, rank

    int8 = {n: a for n, a in artifacts.items() if n.startswith("int8.")}
    if not int8:
        return None
    best = max(int8, key=lambda n: record.candidates[n]["metrics"][settings.verdict.metric])
    base_plan = int8[best]["plan"]
    nodes = base_plan.int8_nodes()
    outs, ins = int8_node_tensors(proto, nodes)
    proxy = proxy_scores(record.candidates[best]["layers"], outs, ins)
    ranking = rank(proxy, order=nodes)
    cfg = settings.precision.search

    keep = settings.precision.remainder  # fp16 (TensorRT) or fp32 (an FP32 remainder, ort_cpu)

    def plan_for(fp16: frozenset[str], why: dict[str, str] | None = None):
        plan = base_plan
        for n in sorted(fp16):
            plan = plan.with_precision([n], keep, f"kept {keep.upper()} by search: "
                                                  f"{(why or {}).get(n, '')}")
        return plan

    measured, measure_note = {}, "not needed: full INT8 passes"
    if record.candidates[best]["verdict"]["status"] != "PASS" and cfg.measure_top > 0:
        measured, ranking = measure_sensitivity(settings, proto, plan_for, ranking[:cfg.measure_top],
                                                ranking, model, splits, enc, ref)
        measure_note = f"top {cfg.measure_top} proxy layers re-ranked by measured damage " \
                       f"(mean KL vs FP32 on {cfg.subset} eval examples)"
    reasons = {n: f"sensitivity rank {i + 1} of {len(ranking)}, output SQNR "
                  f"{proxy[n].get('sqnr_out_db') or float('nan'):.1f} dB in full INT8 ({best})"
                  + (f", measured damage {measured[n]:.3g}" if n in measured else "")
               for i, n in enumerate(ranking)}
    log.info("sensitivity search over %d INT8 layers of %s", len(ranking), best)

    def full_eval(fp16: frozenset[str]) -> EvalResult:
        if not fp16:
            v = record.candidates[best]["verdict"]
            return EvalResult.from_verdict(v, seconds=record.candidates[best]["eval_seconds"],
                                reused=best)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
            art = build_artifact(settings, proto, Path(tmp), "search", ranges=None,
                                 overflow={}, plan=plan_for(fp16, reasons))
            res = evaluate_candidate(settings, "search", art["path"], model, splits, enc,
                                     lengths, reference=ref, emulated=art["emulated"],
                                     artifact_sha=art["sha256"])
        v = res["evidence"]["verdict"]
        return EvalResult.from_verdict(v, seconds=time.perf_counter() - t0,
                            accuracy=res["evidence"]["metrics"]["accuracy"])

    result = search_fp16_set(ranking, full_eval, max_full_evals=cfg.max_full_evals,
                             max_seconds=cfg.max_minutes * 60, prune=cfg.prune)
    found = result.fp16_set
    plan = plan_for(found, reasons)
    art = build_artifact(settings, proto, run_dir, "mixed", ranges=None, overflow={}, plan=plan)
    res = evaluate_candidate(settings, "mixed", art["path"], model, splits, enc, lengths,
                             reference=ref, plan_int8=plan.int8_nodes(), emulated=art["emulated"],
                             artifact_sha=art["sha256"])
    ev = res["evidence"]
    ev.update({"plan_counts": art["plan_counts"], "lint": art["lint"],
               "artifact_sha256": art["sha256"], "calibrator": best,
               "fp16_layers": list(result.fp16_nodes),
               "plan_reasons": {n: plan.decisions[n].reason for n in result.fp16_nodes}})
    search = result.to_dict()
    search.update({"calibrator": best, "quantizable_layers": len(ranking), "ranking": ranking,
                   "proxy": {n: proxy[n] for n in ranking}, "measured": dict(measured),
                   "measured_note": measure_note, "measure_cost": measured.cost() if hasattr(measured, "steps") else {},
                   "pareto": pareto(search["evaluations"]),
                   "full_evals_linear": linear_evals_needed(ranking, found if result else None)})
    return {"artifact": art, "evidence": ev, "search": search}


def recommend(candidates: dict[str, dict]) -> str | None:
    """The PASSing candidate with the most INT8 nodes, ties broken by accuracy."""
    passing = [(c.get("plan_counts", {}).get("int8", 0), c["metrics"]["accuracy"], n != "mixed", n)
               for n, c in candidates.items() if c.get("verdict", {}).get("status") == "PASS"]
    return max(passing)[-1] if passing else None


def slower_than_fp32(candidates: dict[str, dict], name: str | None) -> str | None:
    """A warning when the recommended candidate's measured throughput is below FP32's at a
    batch size (e.g. a mixed ort_cpu plan whose INT8/FP32 boundaries cost more than INT8
    saves), or None. Only compares numbers measured in this run on the same backend."""
    if not name or name == "fp32":
        return None
    lat, ref = (candidates.get(name) or {}).get("latency"), (candidates.get("fp32") or {}).get("latency")
    if not isinstance(lat, dict) or not isinstance(ref, dict):
        return None
    slower = [f"batch {b}: {lat[b]['throughput']:.1f}/s vs FP32 {ref[b]['throughput']:.1f}/s"
              for b in sorted(lat, key=int) if b in ref
              and lat[b].get("throughput", 0) < ref[b].get("throughput", 0)]
    if not slower:
        return None
    return (f"recommended candidate {name} passes on accuracy but was slower than FP32 here ("
            + "; ".join(slower) + "): check the latency table before deploying it")


def write_sha256sums(run_dir: Path, artifacts: dict[str, str]) -> None:
    lines = "".join(f"{sha}  {name}\n" for name, sha in sorted(artifacts.items()))
    from quantkit.calibrate.io import atomic_write_text

    atomic_write_text(run_dir / "SHA256SUMS", lines)

def summary_lines(record: RunRecord) -> list[str]:
    """The one-screen summary printed at the end of a run."""
    lines = [f"quantkit run: {record.experiment}  ->  {record.run_dir}"]
    m = record.model
    lines.append(f"model: {m.get('source')}  sha256 {str(m.get('sha256'))[:12]}"
                 f"{'  (prepared model reused from cache)' if m.get('cached') else ''}")
    d = record.data
    lines.append(f"data: {d.get('name')}  sizes {d.get('sizes')}")
    cal = record.calibration
    if cal:
        lines.append(f"calibration: {cal.get('tensors')} tensors, {cal.get('samples')} samples, "
                     f"{len(cal.get('excluded', {}))} excluded (non-finite), methods "
                     f"{','.join(cal.get('methods', []))}")
    lines.append(f"  {'candidate':<20} {'accuracy':>8} {'macro-F1':>8} {'agree':>6} "
                 f"{'delta [95% CI]':>26}  verdict")
    for name, c in record.candidates.items():
        met = c.get("metrics", {})
        v = c.get("verdict")
        agree = f"{c['agreement_fp32']:.4f}" if "agreement_fp32" in c else "-"
        if v:
            dl = v["deltas"][v["metric"]]
            ci = f"{dl['point']:+.4f} [{dl['low']:+.4f}, {dl['high']:+.4f}]"
            status = v["status"]
        else:
            ci, status = "-", "reference"
        lines.append(f"  {name:<20} {met.get('accuracy', float('nan')):>8.4f} "
                     f"{met.get('macro_f1', float('nan')):>8.4f} {agree:>6} {ci:>26}  {status}")
        if c.get("first_diverging"):
            lines.append(f"  {'':<20} first diverging node: {c.get('first_diverging_node')} "
                         f"(tensor {c['first_diverging']})")
        bc = c.get("backend_check")
        if bc and bc.get("checked") and not bc.get("ok"):
            lines.append(f"  {'':<20} WARNING backend check agreement {bc['agreement']:.3f}")
    if record.candidates:
        any_v = next((c["verdict"] for c in record.candidates.values() if "verdict" in c), None)
        if any_v:
            mg = any_v["margin"]
            if isinstance(mg, dict) and {"kind", "value", "abs", "metric"} <= set(mg):
                lines.append(f"margin: {mg['metric']} within {mg['value']:g} {mg['kind']} of FP32 "
                             f"(absolute {mg['abs']:.4f})")
            else:
                lines.append(f"margin: {mg}")
    lines.append(f"recommended: {record.recommended or 'none (no candidate passed)'}")
    lines += [f"WARNING {n}" for n in record.notes if n.startswith("recommended candidate ")]
    lat = {n: c["latency"] for n, c in record.candidates.items() if isinstance(c.get("latency"), dict)}
    if lat:
        batch = max((b for per in lat.values() for b in per), key=lambda b: int(b))
        thr = ", ".join(f"{n} {per[batch]['throughput']:.0f}/s" for n, per in lat.items()
                        if isinstance(per.get(batch), dict) and "throughput" in per[batch])
        info = record.latency or {}
        where = info.get("execution", "")
        if info.get("device") == "CPU" and info.get("target") == "tensorrt":
            where += ", not a TensorRT prediction"
        lines.append(f"latency (batch {batch}, {where}; P50/P90/P99 and cost in the report): "
                     f"{thr}")
    stages = ", ".join(f"{k} {v.get('seconds', 0):.1f}s" for k, v in record.stages.items())
    lines.append(f"stages: {stages}")
    lines.append(f"record: {Path(record.run_dir) / 'record.json'}")
    html = Path(record.run_dir) / "report.html"
    if html.exists():
        lines.append(f"report: {html}")
    return lines
