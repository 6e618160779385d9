"""The prepared model every stage works on: an ONNX file with its hash and IO specs."""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

from quantkit.fsutil import atomic_path, sha256_file
from quantkit.errors import ModelError, first_line

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
    # what output_name is (model.output.kind resolved): "logits" or "embedding"; and how a
    # token-level embedding is pooled ("mean" over the attention mask, "cls", or "none")
    output_kind: str = "logits"
    pooling: str = "none"

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
        proto = onnx.load(str(p), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"could not parse the ONNX file ({type(exc).__name__})", where=where,
                         value=str(p), fix="re-export the model; the file may be truncated "
                         "or not an ONNX model") from exc
    if not proto.graph.node and not proto.opset_import:
        raise ModelError("the file parses but holds no ONNX graph", where=where, value=str(p),
                         fix="point model.path at an exported .onnx model")
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise ModelError("the model's opset is too old for per-channel Q/DQ", where=where,
                         value=opset, fix=f"convert it to opset >= {MIN_OPSET} "
                         "(onnx.version_converter) or re-export with opset 17")
    if opset > onnx.defs.onnx_opset_version():
        raise ModelError(f"the model's opset is newer than this onnx {onnx.__version__} "
                         f"supports (max {onnx.defs.onnx_opset_version()})", where=where,
                         value=opset, fix="re-export with opset 17, or upgrade onnx and "
                         "onnxruntime")
    _load_external_data(proto, p, where)
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise ModelError(f"the ONNX model is invalid: {first_line(exc)}", where=where,
                         value=str(p), fix="re-export the model with a current exporter") from exc
    check_tensor_types(proto, where=where)
    init_names = {i.name for i in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in init_names]
    outputs = [o.name for o in proto.graph.output]
    if output is not None and output not in outputs:
        raise ModelError("model.output.name is not an output of the model",
                         where="model.output.name", value=output,
                         fix=f"set model.output.name to one of the model's outputs {outputs}")
    return proto, inputs, output or outputs[0], opset


def check_tensor_types(proto: onnx.ModelProto, *, where: str = "model.path") -> None:
    """Every stored tensor (initializers, Constant values) has a data type numpy can hold.

    ``onnx.checker`` accepts unknown type numbers in initializers; everything that reads the
    weights later would fail with a KeyError, so the model is refused here, by name.
    """
    from onnx.external_data_helper import _get_all_tensors

    for t in _get_all_tensors(proto):
        try:
            onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        except (KeyError, ValueError, TypeError) as exc:
            raise ModelError("a stored tensor of the model has an unknown data type",
                             where=f"{where} (tensor {t.name})", value=t.data_type,
                             fix="re-export the model; the file may be corrupt") from exc


def _load_external_data(proto: onnx.ModelProto, path: Path, where: str) -> None:
    """Load the weights stored beside the model; each file must exist inside its directory."""
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_model

    base = path.parent.resolve()
    external = [t for t in _get_all_tensors(proto)
                if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL]
    if not external:
        return
    for t in external:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = (base / location).resolve()
        if not location or Path(location).is_absolute() or not target.is_relative_to(base):
            raise ModelError("the model's external data location leaves the model's directory",
                             where=f"{where} (tensor {t.name})", value=location,
                             fix="re-export the model with its weights inside it or beside it")
        if not target.is_file():
            raise ModelError("an external data file of the ONNX model is missing",
                             where=f"{where} (tensor {t.name})", value=str(target),
                             fix=f"copy {location} beside {path.name}, or re-export the model "
                                 "with its weights inside the .onnx file")
    try:
        load_external_data_for_model(proto, str(base))
    except Exception as exc:
        raise ModelError(f"could not read the model's external data ({type(exc).__name__}: "
                         f"{first_line(exc)})", where=where,
                         value=str(path), fix="re-export the model; its external data file "
                         "may be truncated") from exc


def write_model_atomic(proto: onnx.ModelProto, path: str | os.PathLike) -> str:
    """Write ``proto`` to ``path`` via a temp file + rename; returns its sha256."""
    with atomic_path(path) as tmp:
        onnx.save(proto, str(tmp))
    return sha256_file(path)
