"""One run: the stage order, and nothing else (DESIGN.md).

Each stage is a function in :mod:`quantkit.run` taking the run's :class:`RunContext` and
typed inputs and returning a typed result; the RunRecord is assembled from those results
once, at the end (:func:`quantkit.run.assemble.assemble_record`). No stage reads another
stage's output out of the record.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from quantkit.record.run_record import RunRecord
from quantkit.run.summary import summary_lines  # noqa: F401 (re-exported for __main__)
from quantkit.settings import Settings, build

__all__ = ["run", "summary_lines"]

log = logging.getLogger(__name__)


class _Stages:
    """Times each stage into ``stages`` (name -> info with seconds) and logs it."""

    def __init__(self) -> None:
        self.stages: dict[str, dict] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        log.info("stage %s ...", name)
        t0 = time.perf_counter()
        info: dict = {}
        yield info
        info["seconds"] = round(time.perf_counter() - t0, 3)
        info["peak_rss_gb"] = _peak_rss_gb()  # the process's peak so far: where it rises
        self.stages[name] = info
        log.info("stage %s done in %.1f s (peak RSS %.2f GB)", name, info["seconds"],
                 info["peak_rss_gb"])


def _run_dir(out_dir: str | Path | None) -> Path:
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


def _peak_rss_gb() -> float:
    """This process's peak resident memory so far, GB (ru_maxrss is KiB on Linux)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 3)


def _totals(t_start: float) -> dict:
    """The whole run so far: wall seconds and this process's peak resident memory."""
    return {"seconds": round(time.perf_counter() - t_start, 3), "peak_rss_gb": _peak_rss_gb()}


def run(cfg: DictConfig, *, out_dir: str | Path | None = None) -> RunRecord:
    """Run every stage of one experiment and write record.json (+ reports) to the run dir."""
    from quantkit.assets import cache_root
    from quantkit.environment import host_facts
    from quantkit.run.job import job_facts
    from quantkit.run import (RunResults, assemble_record, build_artifacts, calibrate,
                              apply_ptq, check_backend, check_fp16_range, check_preflight,
                              compare_layers, declared_mixed,
                              evaluate_artifact, evaluate_reference, family_members, load_data,
                              make_context, measure, prepare_model, quant_scope,
                              recommend_signed, record_files, recorded_config, search_mixed,
                              search_skip_reason, sign_off, signoff_skip_reason,
                              target_note)

    t_start = time.perf_counter()
    settings: Settings = build(cfg)
    run_dir = _run_dir(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    record = RunRecord(experiment=settings.experiment_name, run_dir=str(run_dir),
                       command=_command(), seed=settings.seed,
                       config=recorded_config(cfg, settings),
                       started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    record.notes.append(target_note(settings))
    ctx = make_context(settings, run_dir, cache_root(settings.cache_dir))
    check_preflight(ctx)  # one clear error per bad dir / backend / model file, before any work
    record.host = host_facts(settings.backend)  # + GPU, driver, CUDA, TensorRT on backend=trt
    record.job = job_facts(run_dir)  # launcher, worker host, attempt (a sweep's rerun)
    stage, res = _Stages(), RunResults()

    with stage("data"):
        splits = load_data(ctx)
    with stage("model") as info:
        res.prepared = prepared = prepare_model(ctx, splits)
        info["cached"] = prepared.model.cached
    ctx = ctx.with_inputs(model=prepared.model, splits=splits, feeds=prepared.feeds,
                          lengths=prepared.lengths, graph=prepared.graph)
    record.data = prepared.data_record(settings)
    record.model = prepared.model_record()

    res.signoff_skipped = signoff_skip_reason(settings)  # sweep jobs leave test alone
    with stage("fp32_reference"):  # on dev (every choice) and test (the sign-off's pairs)
        res.reference = ref = evaluate_reference(ctx, "dev")
        if not res.signoff_skipped:
            res.reference_test = evaluate_reference(ctx, "test")
    for ev in (res.reference, res.reference_test):  # e.g. FP32 at chance level on this data
        record.notes.extend(ev.notes if ev is not None else ())
    scope = quant_scope(ctx)  # the original graph's quantization scope
    with stage("fp16_range_check") as info:  # the original graph's nodes that overflow FP16
        overflow = check_fp16_range(ctx)
        info.update(overflow.to_record())
    with stage("ptq") as info:  # the recipe, its proven rewrites: the graph to quantize
        res.source = source = apply_ptq(ctx, scope, overflow, ref)
        info.update({"recipe": source.recipe_name, "rewritten": source.is_rewritten})
    with stage("calibration") as info:
        res.calibration = cal = calibrate(ctx, source)
        info.update(cal.info)
    with stage("artifacts") as info:
        res.artifacts = arts = build_artifacts(ctx, cal, overflow, source, ref)
        info["count"] = len(arts)
    with stage("evaluate") as info:  # on dev only: these numbers choose
        res.evaluations = {n: evaluate_artifact(ctx, a, ref) for n, a in arts.items()}
        info["candidates"] = len(arts)
    with stage("layerwise") as info:
        res.layers = compare_layers(ctx, source.scope, arts)
        info["examples"] = res.layers.examples

    search = settings.precision.search
    res.search_skipped = search_skip_reason(settings) if search.enabled else None
    if res.search_skipped:
        log.info("precision search skipped: %s", res.search_skipped)
    elif search.enabled and len(arts) > 1:
        with stage("search") as info:
            res.search = search_mixed(ctx, arts, res.evaluations, res.layers, ref, source)
            if res.search is not None:
                info.update({"full_evals": res.search.full_evals, "bound": res.search.bound})
    every = {**arts, **({"mixed": res.search.artifact} if res.search else {})}
    dev = {**res.evaluations, **({"mixed": res.search.evaluation} if res.search else {})}
    with stage("backend_check"):  # every candidate that can be recommended, on a dev subset
        res.backend_checks = {n: check_backend(ctx, a, ref) for n, a in every.items()}

    if res.signoff_skipped:
        log.info("sign-off skipped: %s", res.signoff_skipped)
    else:
        members = family_members(ctx, res.evaluations, declared_mixed(res.search))
        with stage("signoff") as info:  # declared on dev, then the test split, once per member
            res.signoff = sign_off(ctx, members, every, dev, res.reference_test)
            fam = res.signoff.family  # None: no member had the power to be tested
            info["family"] = list(fam.candidates) if fam is not None else []

    if settings.bench.enabled:
        with stage("latency") as info:  # timings: reused only for the same artifact and host
            models = {"fp32": ref.engine or prepared.model.path,
                      **{n: dev[n].engine or a.path for n, a in every.items()}}
            shas = {"fp32": prepared.model.sha256, **{n: a.sha256 for n, a in every.items()}}
            res.latency = measure(ctx, models, shas)
            info["candidates"] = len(res.latency.candidates)

    if res.signoff is not None:
        res.recommendation, res.notes = recommend_signed(ctx, res.signoff, every,
                                                         res.backend_checks, res.latency)
    assemble_record(record, res)
    record_files(record, run_dir)
    record.stages = {**stage.stages, "run": _totals(t_start)}  # wall time, peak memory
    record.stage_cache = ctx.cache.stats()
    record.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write(run_dir / "record.json")
    log.info("record written to %s", run_dir / "record.json")
    with stage("report"):
        from quantkit.report.render import render_reports

        paths = render_reports(record.to_dict(), run_dir, formats=settings.report.formats)
        record.notes.append("reports: " + ", ".join(str(p) for p in paths.values()))
    return record
