"""One run: the only module that knows the stage order and writes artifacts (DESIGN.md)."""

from __future__ import annotations

import contextlib
import logging
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from quantkit.assets import cache_root
from quantkit.report.record import RunRecord
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
    with stage("model") as info:
        model = prepare_model(settings, splits, cache_dir=cache_dir)
        info["cached"] = model.cached
        record.model = model.to_dict()

    with stage("fp32_reference"):
        ref = evaluate_fp32(settings, model, splits)
        record.candidates["fp32"] = ref["evidence"]

    record.finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record.write(run_dir / "record.json")
    log.info("record written to %s", run_dir / "record.json")
    return record


def text_encoder(settings: Settings, model):
    from quantkit.data.text import TextEncoder, load_tokenizer

    if not model.tokenizer:
        from quantkit.errors import ConfigError

        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<directory with tokenizer.json or hub name>")
    return TextEncoder(load_tokenizer(model.tokenizer), max_length=settings.data.max_length,
                       input_names=model.input_names)


def evaluate_fp32(settings: Settings, model, splits) -> dict:
    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import OrtRunner
    from quantkit.compare.task import task_metrics

    enc = text_encoder(settings, model)
    t0 = time.perf_counter()
    with OrtRunner(model.path, name="fp32") as r:
        logits = run_split(r, enc, splits.eval.texts, output=model.output_name,
                           batch_size=settings.backend.batch_size, progress=settings.progress,
                           desc="FP32 reference")
    seconds = time.perf_counter() - t0
    labels = list(range(len(splits.label_names)))
    metrics = task_metrics(splits.eval.labels, logits, labels=labels, label_names=splits.label_names)
    return {"logits": logits, "evidence": {"artifact": "model.onnx (FP32)", "numerics": "fp32 ORT CPU",
                                           "metrics": metrics, "eval_seconds": round(seconds, 3),
                                           "n": int(len(splits.eval))}}


def summary_lines(record: RunRecord) -> list[str]:
    lines = [f"quantkit run: {record.experiment}  ->  {record.run_dir}"]
    m = record.model
    lines.append(f"model: {m.get('source')}  sha256 {str(m.get('sha256'))[:12]}"
                 f"{'  (prepared model reused from cache)' if m.get('cached') else ''}")
    d = record.data
    lines.append(f"data: {d.get('name')}  sizes {d.get('sizes')}")
    for name, c in record.candidates.items():
        met = c.get("metrics", {})
        extra = ""
        if "verdict" in c:
            extra = f"  verdict {c['verdict'].get('status')}"
        lines.append(f"  {name:<22} accuracy {met.get('accuracy', float('nan')):.4f}"
                     f"  macro-F1 {met.get('macro_f1', float('nan')):.4f}{extra}")
    stages = ", ".join(f"{k} {v.get('seconds', 0):.1f}s" for k, v in record.stages.items())
    lines.append(f"stages: {stages}")
    lines.append(f"record: {Path(record.run_dir) / 'record.json'}")
    return lines
