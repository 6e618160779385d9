"""Stage "model": the prepared FP32 model (exported / head-fitted / cached), its feeds and the
ModelGraph of the FP32 graph (one shape inference for the whole run)."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, replace

import numpy as np
import onnx

from quantkit.backends.runners import ort_runner
from quantkit.data import note_truncation
from quantkit.data.feeds import ImageFeeds, TextFeeds, make_feeds
from quantkit.data.splits import Splits
from quantkit.data.text import TextEncoder, load_tokenizer
from quantkit.errors import ConfigError, ModelError
from quantkit.graph.model_graph import ModelGraph
from quantkit.models import load_model
from quantkit.models.fit import (
    check_class_count,
    check_class_width,
    fixed_batch,
    input_specs,
    resolve_output,
)
from quantkit.models.model import Model
from quantkit.record.provenance import DataRecord
from quantkit.run.context import RunContext
from quantkit.run.model_identity import ModelIdentity, model_identity
from quantkit.run.detection import detector_of
from quantkit.run.verdicts import check_metric_fits
from quantkit.tasks.detection.feeds import DetectionFeeds

__all__ = ["Prepared", "model", "probe_output", "text_encoder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """The prepared FP32 model, its feeds and graph facts, over the run's splits."""

    splits: Splits
    model: Model
    feeds: TextFeeds | ImageFeeds | DetectionFeeds
    lengths: dict[str, np.ndarray | None]  # {"dev", "test"}: token counts (text) or None
    graph: ModelGraph
    identity: ModelIdentity | None = None  # the model for the test ledger

    def data_record(self, settings) -> DataRecord:
        d = settings.data
        # counts and named warnings of the load (duplicates dropped, texts truncated, label-free)
        return DataRecord(name=d.name, source=d.source, sizes=self.splits.sizes(),
                          sha256=self.splits.hashes(), label_names=self.splits.label_names,
                          label_free=self.splits.label_free,
                          info=copy.deepcopy(self.splits.info),
                          kind=d.kind if d.kind != "text" else None,  # text: its original keys
                          feeds=self.feeds.describe() if self.feeds.kind != "text" else None)

    def model_record(self) -> Model:
        return copy.deepcopy(self.model)


def model(ctx: RunContext, splits: Splits) -> Prepared:
    """The FP32 model (exported / head-fitted / cached), its feeds, and its ModelGraph."""
    model = load_model(ctx.settings, splits, cache_dir=ctx.cache_dir)
    graph_proto = onnx.load(model.path)
    out = resolve_output(graph_proto, ctx.settings.model.output,
                         has_labels=not splits.label_free)  # model.output.name / kind / pooling
    model = replace(model, output_name=out.name, output_kind=out.kind, pooling=out.pooling)

    check_metric_fits(ctx.settings, out.kind, has_labels=not splits.label_free,
                      output_name=out.name)  # cosine on logits; accuracy on an embedding
    if ctx.settings.model.kind == "onnx" and not splits.label_free and out.kind == "logits":
        check_class_count(graph_proto, model.output_name, len(splits.label_names))
    if out.kind == "detection":  # every output, decoded (run/detection.py)
        feeds = DetectionFeeds(detector_of(ctx.settings, ctx.cache_dir))
        probe_detections(ctx.settings, model, feeds, splits.dev)
        lengths = {"dev": None, "test": None}
        return Prepared(splits=splits, model=model, feeds=feeds, lengths=lengths,
                        graph=ModelGraph.build(graph_proto))
    feeds = make_feeds(ctx.settings, model, fixed_batch=fixed_batch(input_specs(graph_proto)))

    note_truncation(splits, feeds)  # texts longer than data.max_length: counted, warned
    lengths = {k: feeds.lengths(getattr(splits, k)) for k in ("dev", "test")}
    probe_output(ctx.settings, model, feeds, splits.dev, lengths["dev"],
                 n_classes=0 if splits.label_free else len(splits.label_names))
    graph = ModelGraph.build(graph_proto)
    identity = model_identity(ctx.settings, model, graph_proto, cached=ctx.cached,
                              environment=ctx.measured_key())
    return Prepared(splits=splits, model=model, feeds=feeds, lengths=lengths, graph=graph,
                    identity=identity)


def probe_output(settings, model, feeds, dev, dev_lengths, *, n_classes: int) -> None:
    """The compared output on two tiny dev batches (the shortest and the longest texts;
    images: the first ones), before any real inference: one clear ModelError when it is not
    a float tensor or when its per-example shape changes between batches (a token dimension
    read as classes), and the class-count DataError when a dynamic class dimension turns out
    to differ from the data's labels (``n_classes``; 0: label-free)."""
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


def probe_detections(settings, model, feeds: DetectionFeeds, dev) -> None:
    """The detector on the first two dev images, decoded, before any real inference: the
    outputs the model returns must fit the decoder (a dynamic dimension that turns out to be
    another layout is one clear ModelError naming the shapes)."""
    sub = dev.subset(range(min(2, len(dev))))
    with ort_runner(settings.backend, model.path, name="output-probe") as r:
        for idx, feed in feeds.batches(sub, 2):
            feeds.decode(sub, idx, r.infer(feed, feeds.output_names))


def text_encoder(settings, model):
    """The bare TextEncoder of a text model (benchmarks); runs use the model's feeds."""
    if not model.tokenizer:
        raise ConfigError("a text model needs a tokenizer", where="data.tokenizer", value=None,
                          fix="set data.tokenizer=<directory with tokenizer.json or hub name>")
    return TextEncoder(load_tokenizer(model.tokenizer), max_length=settings.data.max_length,
                       input_names=model.input_names)
