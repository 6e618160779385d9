"""Stage "data" + "model": fail-fast checks, the splits, the prepared model, its feeds and
the ModelGraph of the FP32 graph (one shape inference for the whole run)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import onnx

from quantkit.run.context import RunContext

__all__ = ["Prepared", "check_preflight", "load_data", "prepare_model", "prepared_context",
           "text_encoder"]

log = logging.getLogger(__name__)


def check_preflight(ctx: RunContext) -> None:
    """One clear error before any work: unwritable dirs, a missing backend, a bad ONNX file."""
    from quantkit.fsutil import ensure_dir

    s = ctx.settings
    ensure_dir(ctx.cache_dir, key="cache_dir")
    if s.stage_cache and ctx.cache is not None:
        ensure_dir(ctx.cache.root, key="stage_cache_dir" if s.stage_cache_dir else "cache_dir")
    if s.backend.name == "trt":
        from quantkit.backends.trt import require_cuda_runtime, require_tensorrt

        require_tensorrt()
        require_cuda_runtime()
    else:  # an execution provider this onnxruntime lacks
        from quantkit.backends.ort import check_providers

        check_providers(s.backend.providers)
    if s.model.kind == "onnx":
        from quantkit.models.base import inspect_onnx

        inspect_onnx(s.model.path, output=s.model.output)


def load_data(ctx: RunContext):
    """The run's seeded, hashed splits (quantkit.data.Splits)."""
    from quantkit.data import load_splits

    return load_splits(ctx.settings, cache_dir=ctx.cache_dir)


@dataclass(frozen=True)
class Prepared:
    """The prepared FP32 model, its feeds and graph facts, over the run's splits."""

    splits: Any
    model: Any  # quantkit.models.Model
    feeds: Any  # TextFeeds | ImageFeeds
    eval_lengths: Any  # token counts of the eval split (text) or None
    graph: Any  # quantkit.graph.model_graph.ModelGraph

    def data_record(self, settings) -> dict:
        d = settings.data
        rec = {"name": d.name, "source": d.source, "sizes": self.splits.sizes(),
               "sha256": self.splits.hashes(), "label_names": self.splits.label_names}
        if d.kind != "text":  # text records keep their original keys
            rec["kind"] = d.kind
        if self.feeds.kind != "text":
            rec["feeds"] = self.feeds.describe()
        return rec

    def model_record(self) -> dict:
        return self.model.to_dict()


def prepare_model(ctx: RunContext, splits) -> Prepared:
    """The FP32 model (exported / head-fitted / cached), its feeds, and its ModelGraph."""
    from quantkit.data.feeds import make_feeds
    from quantkit.graph.model_graph import ModelGraph
    from quantkit.models import prepare_model as _prepare

    model = _prepare(ctx.settings, splits, cache_dir=ctx.cache_dir)
    feeds = make_feeds(ctx.settings, model)
    graph = ModelGraph.build(onnx.load(model.path))
    return Prepared(splits=splits, model=model, feeds=feeds,
                    eval_lengths=feeds.lengths(splits.eval), graph=graph)


def prepared_context(settings, run_dir) -> RunContext:
    """A RunContext with data, model, feeds and ModelGraph prepared exactly as a run does
    (benchmarks and tests call stages on it). Uses the run's stage cache settings."""
    from pathlib import Path

    from quantkit.assets import cache_root
    from quantkit.run.context import make_context

    ctx = make_context(settings, Path(run_dir), cache_root(settings.cache_dir))
    splits = load_data(ctx)
    p = prepare_model(ctx, splits)
    return ctx.with_inputs(model=p.model, splits=splits, feeds=p.feeds,
                           eval_lengths=p.eval_lengths, graph=p.graph)


def text_encoder(settings, model):
    """The bare TextEncoder of a text model (benchmarks); runs use the model's feeds."""
    from quantkit.data.text import TextEncoder, load_tokenizer
    from quantkit.errors import ConfigError

    if not model.tokenizer:
        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<directory with tokenizer.json or hub name>")
    return TextEncoder(load_tokenizer(model.tokenizer), max_length=settings.data.max_length,
                       input_names=model.input_names)
