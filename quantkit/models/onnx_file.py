"""Bring your own ONNX file (``model=onnx model.path=...``)."""

from __future__ import annotations

from quantkit.assets import sha256_file
from quantkit.models.model import Model, inspect_onnx
from quantkit.settings import ModelConfig


def load_onnx_model(cfg: ModelConfig, *, label_names: list[str], tokenizer: str | None) -> Model:
    _, inputs, output, opset = inspect_onnx(cfg.path, output=cfg.output.name)
    return Model(path=str(cfg.path), sha256=sha256_file(cfg.path), input_names=inputs,
                 output_name=output, opset=opset, label_names=label_names, tokenizer=tokenizer,
                 source=f"onnx:{cfg.path}")


def load_shipped_model(path, *, label_names: list[str], source: str) -> Model:
    """A zoo model used as its package ships it (a detector's ONNX file), checked as a user's
    file is."""
    _, inputs, output, opset = inspect_onnx(path, where="model.name")
    return Model(path=str(path), sha256=sha256_file(path), input_names=inputs,
                 output_name=output, opset=opset, label_names=label_names, source=source)
