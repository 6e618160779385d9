"""One run: the stage order, and nothing else (DESIGN.md).

Each stage is the function of its own name in ``quantkit/run/stages/<stage>.py``, taking the
run's :class:`RunContext` and typed inputs and returning a typed result; the RunRecord is
assembled from those results once, at the end (the record stage). No stage reads another
stage's output out of the record.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import shlex
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from quantkit.assets import cache_root
from quantkit.environment import host_facts
from quantkit.ledger_dialect import mask_secrets
from quantkit.record.migrate import parse_record
from quantkit.record.provenance import CacheCount, JobRecord, StageTiming
from quantkit.record.run_record import RunRecord
from quantkit.report.summary import summary_lines
from quantkit.run.context import RunContext, make_context
from quantkit.run.identity import recorded_config, target_note
from quantkit.run.job import job_facts
from quantkit.run.scope import quant_scope
from quantkit.run.stages.artifacts import artifacts
from quantkit.run.stages.backend_check import backend_check
from quantkit.run.stages.calibration import calibration
from quantkit.run.stages.data import data
from quantkit.run.stages.evaluate import evaluate
from quantkit.run.stages.fp16_range_check import fp16_range_check
from quantkit.run.stages.fp32_reference import fp32_reference
from quantkit.run.stages.latency import latency
from quantkit.run.stages.layerwise import layerwise
from quantkit.run.stages.model import model
from quantkit.run.stages.preflight import preflight
from quantkit.run.stages.ptq import ptq
from quantkit.run.stages.recommend import recommend
from quantkit.run.stages.record import RunResults, record
from quantkit.run.stages.report import report
from quantkit.run.stages.search import declared_mixed, search, search_skip_reason
from quantkit.run.stages.signoff import family_members, signoff, signoff_skip_reason
from quantkit.settings import Settings, build

__all__ = ["prepared_context", "run", "summary_lines"]

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
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    raise RuntimeError("run() outside Hydra needs out_dir")


def _command() -> str:
    """The command line that started this run (Hydra's overrides, else argv)."""
    if HydraConfig.initialized():
        overrides = list(HydraConfig.get().overrides.task)
        return "python -m quantkit " + " ".join(shlex.quote(o) for o in overrides)
    return " ".join(shlex.quote(a) for a in sys.argv)


def _peak_rss_gb() -> float:
    """This process's peak resident memory so far, GB (ru_maxrss is KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 3)


def _totals(t_start: float) -> dict:
    """The whole run so far: wall seconds and this process's peak resident memory."""
    return {"seconds": round(time.perf_counter() - t_start, 3), "peak_rss_gb": _peak_rss_gb()}


def _with_model(ctx: RunContext, stage: _Stages) -> tuple[RunContext, object]:
    """The data and model stages: the context every later stage reads, and the Prepared."""
    with stage("data"):
        splits = data(ctx)
    with stage("model") as info:
        prepared = model(ctx, splits)
        info["cached"] = prepared.model.cached
    return ctx.with_inputs(model=prepared.model, splits=splits, feeds=prepared.feeds,
                           lengths=prepared.lengths, graph=prepared.graph,
                           identity=prepared.identity), prepared


def prepared_context(settings: Settings, run_dir: str | Path) -> RunContext:
    """A RunContext with data, model, feeds and ModelGraph prepared exactly as a run does
    (benchmarks and tests call stages on it). Uses the run's stage cache settings."""
    ctx = make_context(settings, Path(run_dir), cache_root(settings.cache_dir))
    return _with_model(ctx, _Stages())[0]


def run(cfg: DictConfig, *, out_dir: str | Path | None = None,
        command: str | None = None) -> RunRecord:
    """Run every stage of one experiment and write record.json (+ reports) to the run dir."""
    t_start = time.perf_counter()
    settings: Settings = build(cfg)
    run_dir = _run_dir(out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rec = RunRecord(experiment=settings.experiment_name, run_dir=str(run_dir),
                    command=mask_secrets(command or _command()), seed=settings.seed,
                    config=recorded_config(cfg, settings),
                    started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    rec.notes.append(target_note(settings))
    ctx = make_context(settings, run_dir, cache_root(settings.cache_dir))
    preflight(ctx)  # one clear error per bad dir / backend / model file, before any work
    rec.host = host_facts(settings.backend)  # + GPU, driver, CUDA, TensorRT on backend=trt
    rec.job = JobRecord(**job_facts(run_dir))  # launcher, worker host, attempt (a rerun)
    stage, res = _Stages(), RunResults()

    ctx, res.prepared = _with_model(ctx, stage)
    rec.data = res.prepared.data_record(settings)
    rec.model = res.prepared.model_record()

    res.signoff_skipped = signoff_skip_reason(settings)  # sweep jobs leave test alone
    with stage("fp32_reference"):  # on dev (every choice) and test (the sign-off's pairs)
        res.reference = ref = fp32_reference(ctx, "dev")
        if not res.signoff_skipped:
            res.reference_test = fp32_reference(ctx, "test")
    for ev in (res.reference, res.reference_test):  # e.g. FP32 at chance level on this data
        rec.notes.extend(ev.notes if ev is not None else ())
    scope = quant_scope(ctx, ctx.graph)  # the original graph's quantization scope
    with stage("fp16_range_check") as info:  # the original graph's nodes that overflow FP16
        overflow = fp16_range_check(ctx)
        info.update(overflow.to_record())
    with stage("ptq") as info:  # the recipe and its proven rewrites; one source per format
        res.sources = sources = ptq(ctx, scope, overflow, ref)
        info.update({"recipe": sources.int8.recipe_name, "rewritten": sources.int8.is_rewritten})
    with stage("calibration") as info:
        res.calibration = cal = calibration(ctx, sources)
        info.update(cal.info)
    with stage("artifacts") as info:
        res.artifacts = arts = artifacts(ctx, cal, overflow, sources)
        info["count"] = len(arts)
    with stage("evaluate") as info:  # on dev only: these numbers choose
        res.evaluations = evaluate(ctx, arts, ref)
        info["candidates"] = len(arts)
    with stage("layerwise") as info:
        res.layers = layerwise(ctx, sources.int8.scope, arts)
        info["examples"] = res.layers.examples

    config = settings.precision.search
    res.search_skipped = search_skip_reason(settings) if config.enabled else None
    if res.search_skipped:
        log.info("precision search skipped: %s", res.search_skipped)
    elif config.enabled and len(arts) > 1:
        with stage("search") as info:
            res.search = search(ctx, arts, res.evaluations, res.layers, ref, sources.int8)
            if res.search is not None:
                info.update({"full_evals": res.search.full_evals, "bound": res.search.bound})
    every = {**arts, **({"mixed": res.search.artifact} if res.search else {})}
    dev = {**res.evaluations, **({"mixed": res.search.evaluation} if res.search else {})}
    # the family (declared on dev) is what can be recommended: each member's engine gate
    # runs at alpha over its size
    members = ([] if res.signoff_skipped
               else family_members(ctx, res.evaluations, declared_mixed(res.search)))
    with stage("backend_check"):  # every candidate that can be recommended, on a dev subset
        res.backend_checks = {n: backend_check(ctx, a, ref, family_size=len(members))
                              for n, a in every.items()}

    if res.signoff_skipped:
        log.info("sign-off skipped: %s", res.signoff_skipped)
    else:
        with stage("signoff") as info:  # declared on dev, then the test split, once per member
            res.signoff = signoff(ctx, members, every, dev, res.reference_test)
            fam = res.signoff.family  # None: no member had the power to be tested
            info["family"] = list(fam.candidates) if fam is not None else []

    if settings.bench.enabled:
        with stage("latency") as info:  # timings: reused only for the same artifact and host
            models = {"fp32": ref.engine or res.prepared.model.path,
                      **{n: dev[n].engine or a.path for n, a in every.items()}}
            shas = {"fp32": res.prepared.model.sha256,
                    **{n: a.sha256 for n, a in every.items()}}
            res.latency = latency(ctx, models, shas)
            info["candidates"] = len(res.latency.candidates)

    if res.signoff is not None:
        res.recommendation, res.notes = recommend(ctx, res.signoff, every, res.backend_checks,
                                                  res.latency)
    record(rec, res, run_dir)
    rec.stages = {name: StageTiming(**info)  # what each stage noted; wall time, peak memory
                  for name, info in {**stage.stages, "run": _totals(t_start)}.items()}
    rec.stage_cache = {name: CacheCount(**c) for name, c in ctx.cache.stats().items()}
    rec.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rec.write(run_dir / "record.json")
    log.info("record written to %s", run_dir / "record.json")
    rec = parse_record(rec.to_dict())  # as written, read back through the same types
    with stage("report"):
        paths = report(rec, run_dir, settings.report.formats)
        rec.notes.append("reports: " + ", ".join(str(p) for p in paths.values()))
    return rec
