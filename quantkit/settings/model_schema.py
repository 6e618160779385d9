"""model.* schema: the model to quantize, its output, inputs and fitted head; model checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from omegaconf import MISSING

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import _choice


@dataclass
class HeadConfig:
    """Classification head fitted with scikit-learn on the train split (zoo models)."""

    C: float = 1.0
    max_iter: int = 2000
    # pose the fit on standardized features (quantkit/models/head.py solve_logistic_head):
    # the same kind of optimum, far better conditioned when the features' scales differ
    standardize: bool = False
    # image zoo models: fit on a seeded subset of this many train images (null = all); the
    # calibration images are then drawn from the train images the head never saw
    n_train: Optional[int] = None


@dataclass
class DecodeConfig:
    """A detector's decode and NMS settings (model.output.kind=detection); null: the decoder
    family's default (quantkit/tasks/detection/decoders.py FAMILY_DEFAULTS: ultralytics'
    validation for yolov8 / yolov5, PaddleDetection's PicoDet eval for gfl)."""

    score_threshold: Optional[float] = None  # candidates scoring at most this are dropped
    iou_threshold: Optional[float] = None  # class-wise NMS suppresses overlaps above it
    max_det: Optional[int] = None  # detections kept per image
    agnostic: Optional[bool] = None  # NMS across classes
    multi_label: Optional[bool] = None  # every class above the threshold is a candidate
    pre_nms_top_k: Optional[int] = None  # candidates kept per stride (gfl) / image by score
    strides: Optional[list[int]] = None  # gfl: one per score / box output pair (null: inferred)
    cell_offset: Optional[float] = None  # gfl: anchor point offset (0.5 PicoDet, 0 NanoDet)
    box_format: Optional[str] = None  # nms: xyxy | cxcywh


@dataclass
class DetectPreprocessConfig:
    """How images become a detector's input; null: the family's own preprocessing
    (quantkit/tasks/detection/preprocess.py FAMILY_PREPROCESS)."""

    resize: Optional[str] = None  # letterbox (keep the aspect, pad) | plain (stretch)
    anchor: Optional[str] = None  # letterbox: center | top_left
    pad_value: Optional[int] = None
    mean: Optional[list[float]] = None  # on [0, 1], in the model's channel order
    std: Optional[list[float]] = None
    channel_order: Optional[str] = None  # RGB | BGR
    height: Optional[int] = None  # a model with a dynamic spatial size: its input size
    width: Optional[int] = None


@dataclass
class OutputConfig:
    """Which model output is compared, what it is, and how token-level outputs are pooled."""

    name: Optional[str] = None  # the output to compare; default: the model's first output
    # auto: rank 2 [B, C] with labels -> logits; rank 3 [B, T, H] or no labels -> embedding;
    # detection: every output, read by model.output.decoder (never guessed)
    kind: str = "auto"  # auto | logits | embedding | detection
    pooling: str = "mean"  # token-level [B, T, H] outputs: mean (attention-masked) | cls | none
    # detection: the export layout (yolov8 | yolov5 | gfl | nms), its thresholds and
    # preprocessing (null: the family's defaults), class names (empty: from the model's
    # metadata), and for label-free data the score from which FP32's detections are the
    # ground truth the candidate is scored against
    decoder: Optional[str] = None
    family: Optional[str] = None  # preprocessing family when not the decoder's (nudenet)
    class_names: list[str] = field(default_factory=list)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    preprocess: DetectPreprocessConfig = field(default_factory=DetectPreprocessConfig)
    gt_score_min: float = 0.25


@dataclass
class InputsConfig:
    """Model input names for the tokenizer's fields (null: the field's own name)."""

    input_ids: Optional[str] = None
    attention_mask: Optional[str] = None
    token_type_ids: Optional[str] = None  # fed only when the model has this input


@dataclass
class ModelConfig:
    kind: str = MISSING  # zoo | onnx | hub
    name: str = MISSING
    path: Optional[str] = None  # kind=onnx: the ONNX file
    hub_id: Optional[str] = None  # kind=hub: a Hugging Face model id or local directory
    output: OutputConfig = field(default_factory=OutputConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    opset: int = 17
    pooling: str = "mean"  # kind=hub: mean | cls
    trust_remote_code: bool = False
    head: HeadConfig = field(default_factory=HeadConfig)
    # what the test ledger files this model's looks under (quantkit/verdict/ledger.py):
    # null = its fingerprint (weights + FP32 outputs on a fixed probe: a re-export is the
    # same model); a name declares two files the same model (or one file another model)
    id: Optional[str] = None


def validate_model(m: ModelConfig) -> None:
    """Model kind, its file or hub id, pooling and output (model.*)."""
    _choice("model.kind", m.kind, ("zoo", "onnx", "hub"))
    if m.kind == "onnx" and not m.path:
        raise ConfigError("model=onnx needs a file", where="model.path", value=m.path,
                          fix="add model.path=/path/to/model.onnx")
    if m.kind == "hub" and not m.hub_id:
        raise ConfigError("model.kind=hub needs a model id", where="model.hub_id",
                          value=m.hub_id, fix="add model.hub_id=<org/name or local dir>")
    _choice("model.pooling", m.pooling, ("mean", "cls"))
    if m.id is not None and not str(m.id).strip():
        raise ConfigError("config key model.id must name the model", value=m.id,
                          fix="e.g. model.id=sentiment-v3, or null for the model's fingerprint")
    _choice("model.output.kind", m.output.kind, ("auto", "logits", "embedding", "detection"))
    _choice("model.output.pooling", m.output.pooling, ("mean", "cls", "none"))
    validate_detection_output(m.output)


def validate_detection_output(o: OutputConfig) -> None:
    """model.output.decoder and the detection settings: a decoder only with
    kind=detection, and kind=detection only with a known decoder."""
    decoders = ("yolov8", "yolov5", "gfl", "nms")
    if o.kind != "detection":
        if o.decoder is not None:
            raise ConfigError("model.output.decoder reads a detector's outputs, and "
                              f"model.output.kind is {o.kind}", where="model.output.decoder",
                              value=o.decoder,
                              fix="add model.output.kind=detection, or remove model.output.decoder")
        return
    if o.decoder is None:
        raise ConfigError("model.output.kind=detection needs the export layout of the "
                          "detector's outputs", where="model.output.decoder", value=None,
                          fix=f"add model.output.decoder=<one of {' | '.join(decoders)}>")
    _choice("model.output.decoder", o.decoder, decoders)
    if not 0.0 < o.gt_score_min < 1.0:
        raise ConfigError("config key model.output.gt_score_min must be in (0, 1)",
                          value=o.gt_score_min, fix="e.g. model.output.gt_score_min=0.25")
