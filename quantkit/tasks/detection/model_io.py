"""What a detector's ONNX file declares: its outputs (for the decoder's shape check before
anything runs), its fixed input size, and its class names from the metadata exporters write
(PaddleDetection / rapid-layout: ``character``, one name a line; ultralytics: ``names``, a
dict literal ``{0: 'person', ...}``)."""

from __future__ import annotations

import ast
from typing import Any

from quantkit.errors import ModelError
from quantkit.tasks.detection.decoders import OutputSpec

__all__ = ["output_specs", "input_hw", "class_names"]

_ELEM = {1: "float32", 10: "float16", 11: "float64", 6: "int32", 7: "int64", 9: "bool"}


def _dims(value_info: Any) -> tuple:
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        else:
            out.append(d.dim_param or None)
    return tuple(out)


def output_specs(model: Any) -> list[OutputSpec]:
    """The declared outputs of an ONNX ``ModelProto`` (name, shape with symbolic dims,
    dtype), in graph order."""
    return [OutputSpec(o.name, _dims(o), _ELEM.get(o.type.tensor_type.elem_type, "other"))
            for o in model.graph.output]


def input_hw(model: Any) -> tuple[int | None, int | None]:
    """(height, width) of the first image input [B, C, H, W]; None where dynamic."""
    inits = {i.name for i in model.graph.initializer}
    ins = [i for i in model.graph.input if i.name not in inits]
    if not ins:
        raise ModelError("the model has no input", where="model.graph.input", value=0,
                         fix="export the detector with its image input")
    d = _dims(ins[0])
    if len(d) != 4:
        raise ModelError("a detector's input is an image batch [B, C, H, W]",
                         where=f"input {ins[0].name}", value=d,
                         fix="export with an NCHW image input")
    h, w = d[2], d[3]
    return (h if isinstance(h, int) else None, w if isinstance(w, int) else None)


def class_names(model: Any) -> list[str] | None:
    """Class names from the model's metadata, or None when it carries none."""
    meta = {p.key: p.value for p in model.metadata_props}
    if "character" in meta:
        return [ln for ln in meta["character"].splitlines() if ln.strip()]
    if "names" in meta:
        try:
            names = ast.literal_eval(meta["names"])
        except (ValueError, SyntaxError):
            return None
        if isinstance(names, dict):
            return [str(names[k]) for k in sorted(names)]
        if isinstance(names, (list, tuple)):
            return [str(n) for n in names]
    return None
