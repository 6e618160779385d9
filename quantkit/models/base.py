"""The prepared model every stage works on: an ONNX file with its hash and IO specs."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from quantkit.fsutil import atomic_path, atomic_write_json, sha256_file
from quantkit.errors import ModelError

log = logging.getLogger(__name__)

MIN_OPSET = 13  # per-channel Q/DQ (axis attribute) needs opset 13


@dataclass
class Model:
    path: str
    sha256: str
    input_names: list[str]
    output_name: str
    opset: int
    label_names: list[str] = field(default_factory=list)
    tokenizer: str | None = None
    source: str = ""
    cached: bool = False

    def load(self) -> onnx.ModelProto:
        return onnx.load(self.path)

    def to_dict(self) -> dict:
        return asdict(self)


def inspect_onnx(path: str | os.PathLike, *, output: str | None = None, where: str = "model.path"
                 ) -> tuple[onnx.ModelProto, list[str], str, int]:
    """Load and check an ONNX file: (proto, input names, logits output name, opset)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError("ONNX model file not found", where=where, value=str(p),
                         fix="point model.path at an existing .onnx file")
    try:
        proto = onnx.load(str(p))
    except Exception as exc:
        raise ModelError(f"could not parse the ONNX file ({type(exc).__name__})", where=where,
                         value=str(p), fix="re-export the model; the file may be truncated, "
                         "or its external data files are missing beside it") from exc
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise ModelError(f"the ONNX model is invalid: {str(exc).splitlines()[0]}", where=where,
                         value=str(p), fix="re-export the model with a current exporter") from exc
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise ModelError("the model's opset is too old for per-channel Q/DQ", where=where,
                         value=opset, fix=f"convert it to opset >= {MIN_OPSET} "
                         "(onnx.version_converter) or re-export with opset 17")
    init_names = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in init_names]
    outputs = [o.name for o in proto.graph.output]
    if output is not None and output not in outputs:
        raise ModelError("model.output is not an output of the model", where="model.output",
                         value=output, fix=f"choose one of {outputs}")
    return proto, inputs, output or outputs[0], opset


def write_model_atomic(proto: onnx.ModelProto, path: str | os.PathLike) -> str:
    """Write ``proto`` to ``path`` via a temp file + rename; returns its sha256."""
    with atomic_path(path) as tmp:
        onnx.save(proto, str(tmp))
    return sha256_file(path)


def write_json_atomic(obj, path: str | os.PathLike) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (argument order: object first)."""
    atomic_write_json(path, obj)
