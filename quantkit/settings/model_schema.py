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
class OutputConfig:
    """Which model output is compared, what it is, and how token-level outputs are pooled."""

    name: Optional[str] = None  # the output to compare; default: the model's first output
    # auto: rank 2 [B, C] with labels -> logits; rank 3 [B, T, H] or no labels -> embedding
    kind: str = "auto"  # auto | logits | embedding
    pooling: str = "mean"  # token-level [B, T, H] outputs: mean (attention-masked) | cls | none


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
    _choice("model.output.kind", m.output.kind, ("auto", "logits", "embedding"))
    _choice("model.output.pooling", m.output.pooling, ("mean", "cls", "none"))
