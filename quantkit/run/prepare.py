"""Stage "data" + "model": fail-fast checks, the splits, the prepared model, its feeds and
the ModelGraph of the FP32 graph (one shape inference for the whole run)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from quantkit.run.context import RunContext

if TYPE_CHECKING:
    from quantkit.data.feeds import ImageFeeds, TextFeeds
    from quantkit.data.splits import Splits
    from quantkit.graph.model_graph import ModelGraph
    from quantkit.models.model import Model

__all__ = ["Prepared", "check_preflight", "load_data", "prepare_model", "prepared_context",
           "probe_output", "text_encoder"]

log = logging.getLogger(__name__)


def check_preflight(ctx: RunContext) -> None:
    """One clear error before any work: unwritable dirs, a missing backend, a bad ONNX file."""
    from quantkit.fsutil import ensure_dir

    s = ctx.settings
    ensure_dir(ctx.cache_dir, key="cache_dir")
    if s.stage_cache and ctx.cache is not None:
        ensure_dir(ctx.cache.root, key="stage_cache_dir" if s.stage_cache_dir else "cache_dir")
    if s.backend.name == "trt":  # tensorrt of the pinned major, libcudart, backend.trt.device
        from quantkit.backends.trt.infer import preflight

        preflight(s)
    else:  # an execution provider this onnxruntime lacks
        from quantkit.backends.ort import check_providers

        check_providers(s.backend.providers)
    if s.model.kind == "onnx":
        from quantkit.models.model import inspect_onnx

        proto, _, output, _ = inspect_onnx(s.model.path, output=s.model.output.name)
        check_model_fits(s, proto)


def check_model_fits(settings, proto) -> None:
    """A BYO model that cannot run with these settings: one clear error before any data is
    read (custom-domain ops, a fixed batch vs the batch settings; data.kind: data/feeds.py)."""
    from quantkit.data.text_inputs import check_text_inputs
    from quantkit.models.fit import (check_custom_ops, check_fixed_batch, input_specs,
                                     resolve_output)

    s = settings
    check_custom_ops(proto)
    specs = input_specs(proto)
    resolve_output(proto, s.model.output, has_labels=s.data.label_column is not None)
    if s.data.kind == "text" and any(sp.elem_type in (onnx.TensorProto.INT64,
                                                        onnx.TensorProto.INT32) for sp in specs):
        # model.inputs.* vs a text model's input names (an image model given text: data.kind
        # is checked with the feeds)
        check_text_inputs([sp.name for sp in specs], s.model.inputs)
    sizes = {"data.batch_size": s.data.batch_size, "backend.batch_size": s.backend.batch_size,
             "calibrator.batch_size": s.calibrator.batch_size,
             "compare.batch_size": s.compare.batch_size}
    if s.bench.enabled:
        sizes["bench.batch_sizes"] = list(s.bench.batch_sizes)
    check_fixed_batch(specs, sizes)


def load_data(ctx: RunContext):
    """The run's seeded, hashed splits (quantkit.data.Splits)."""
    from quantkit.data import load_splits

    return load_splits(ctx.settings, cache_dir=ctx.cache_dir)


@dataclass(frozen=True)
class Prepared:
    """The prepared FP32 model, its feeds and graph facts, over the run's splits."""

    splits: Splits
    model: Model
    feeds: TextFeeds | ImageFeeds
    lengths: dict[str, np.ndarray | None]  # {"dev", "test"}: token counts (text) or None
    graph: ModelGraph

    def data_record(self, settings) -> dict:
        d = settings.data
        rec = {"name": d.name, "source": d.source, "sizes": self.splits.sizes(),
               "sha256": self.splits.hashes(), "label_names": self.splits.label_names}
        # counts and named warnings of the load (duplicates dropped, texts truncated, label-free)
        rec["label_free"] = self.splits.label_free
        rec["info"] = self.splits.info.to_dict()
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
    from quantkit.models import load_model

    from dataclasses import replace

    from quantkit.models.fit import resolve_output

    model = load_model(ctx.settings, splits, cache_dir=ctx.cache_dir)
    graph_proto = onnx.load(model.path)
    out = resolve_output(graph_proto, ctx.settings.model.output,
                         has_labels=not splits.label_free)  # model.output.name / kind / pooling
    model = replace(model, output_name=out.name, output_kind=out.kind, pooling=out.pooling)
    from quantkit.run.verdicts import check_metric_fits

    check_metric_fits(ctx.settings, out.kind, has_labels=not splits.label_free,
                      output_name=out.name)  # cosine on logits; accuracy on an embedding
    if ctx.settings.model.kind == "onnx" and not splits.label_free and out.kind == "logits":
        from quantkit.models.fit import check_class_count

        check_class_count(graph_proto, model.output_name, len(splits.label_names))
    feeds = make_feeds(ctx.settings, model)
    from quantkit.data import note_truncation

    note_truncation(splits, feeds)  # texts longer than data.max_length: counted, warned
    lengths = {k: feeds.lengths(getattr(splits, k)) for k in ("dev", "test")}
    probe_output(ctx.settings, model, feeds, splits.dev, lengths["dev"],
                 n_classes=0 if splits.label_free else len(splits.label_names))
    graph = ModelGraph.build(graph_proto)
    return Prepared(splits=splits, model=model, feeds=feeds, lengths=lengths, graph=graph)


def probe_output(settings, model, feeds, dev, dev_lengths, *, n_classes: int) -> None:
    """The compared output on two tiny dev batches (the shortest and the longest texts;
    images: the first ones), before any real inference: one clear ModelError when it is not
    a float tensor or when its per-example shape changes between batches (a token dimension
    read as classes), and the class-count DataError when a dynamic class dimension turns out
    to differ from the data's labels (``n_classes``; 0: label-free)."""
    import numpy as np

    from quantkit.backends.runners import ort_runner
    from quantkit.errors import ModelError
    from quantkit.models.fit import check_class_width

    n = len(dev)
    if n == 0:
        return
    order = (np.argsort(dev_lengths, kind="stable") if dev_lengths is not None
             else np.arange(n))
    picks = sorted({int(i) for i in (*order[:2], *order[-2:])})
    sub = dev.subset(picks)
    sub_lengths = None if dev_lengths is None else np.asarray(dev_lengths)[picks]
    shapes, dtype = [], None
    name = model.output_name
    with ort_runner(settings.backend, model.path, name="output-probe") as r:
        for _, feed in feeds.batches(sub, 2, lengths=sub_lengths):
            y = r.infer(feed, [name])[name]
            dtype = y.dtype
            if y.dtype.kind != "f":
                break
            if getattr(feeds, "pooling", "none") != "none":
                y = feeds.pool(y, feed)
            shapes.append(tuple(y.shape[1:]))
    if dtype is not None and dtype.kind != "f":
        raise ModelError(f"the compared output {name} is {dtype}, not a float tensor",
                         where="model.output.name", value=name,
                         fix="set model.output.name to the model's logits or embedding output")
    if len(set(shapes)) > 1:
        raise ModelError(f"the compared output {name} has another per-example shape in each "
                         f"batch ({' vs '.join(str(list(s)) for s in dict.fromkeys(shapes))}): "
                         "its width follows the input length", where="model.output.name",
                         value=name,
                         fix="select an output of fixed width (logits [batch, classes] or a "
                             "pooled embedding) with model.output.name, or pool token states "
                             "with model.output.kind=embedding model.output.pooling=mean")
    if shapes and model.output_kind == "logits" and len(shapes[0]) == 1:
        check_class_width(name, shapes[0][0], n_classes)


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
                           lengths=p.lengths, graph=p.graph)


def text_encoder(settings, model):
    """The bare TextEncoder of a text model (benchmarks); runs use the model's feeds."""
    from quantkit.data.text import TextEncoder, load_tokenizer
    from quantkit.errors import ConfigError

    if not model.tokenizer:
        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<directory with tokenizer.json or hub name>")
    return TextEncoder(load_tokenizer(model.tokenizer), max_length=settings.data.max_length,
                       input_names=model.input_names)
