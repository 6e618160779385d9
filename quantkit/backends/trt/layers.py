"""Layer report: the engine inspector's JSON, and which planned-INT8 ONNX nodes really run INT8.

Parsing and the check are plain Python over the inspector JSON (``get_engine_information(JSON)``
or trtexec ``--exportLayerInfo``); only :func:`layer_report` of a built engine needs tensorrt.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from quantkit.backends.trt.availability import require_cuda_runtime, require_tensorrt
from quantkit.backends.trt.session import errors_text, init_plugins, trt_logger
from quantkit.errors import BackendError
from quantkit.fsutil import atomic_write_text

log = logging.getLogger(__name__)

_NAMES_ONLY_FIX = ("rebuild with detailed profiling verbosity (build_engine does; trtexec "
                   "--profilingVerbosity=detailed)")


def parse_layer_info(info: str | bytes | Mapping | Sequence) -> list[dict]:
    """Layers from the engine inspector's JSON (``get_engine_information(JSON)`` or trtexec
    ``--exportLayerInfo``): ``{"Layers": [{"Name", "LayerType", "Inputs": [{"Name",
    "Format/Datatype", ...}], "Outputs": [...], "Metadata", ...}], "Bindings": [...]}``.

    Every returned layer has ``Name`` (str) and ``Inputs``/``Outputs`` (lists of dicts).
    A names-only report (engine built without DETAILED verbosity) raises ``BackendError``.
    """
    data = info
    if isinstance(info, (str, bytes)):
        try:
            data = json.loads(info)
        except json.JSONDecodeError as exc:
            raise BackendError("engine layer information is not valid JSON",
                               value=f"{exc.msg} (line {exc.lineno})", fix=_NAMES_ONLY_FIX) from exc
    if isinstance(data, Mapping):
        if "Layers" not in data:
            raise BackendError("engine layer information has no 'Layers' list",
                               value=sorted(data)[:5], fix=_NAMES_ONLY_FIX)
        data = data["Layers"]
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise BackendError("engine layer information 'Layers' is not a list",
                           value=type(data).__name__, fix=_NAMES_ONLY_FIX)
    layers: list[dict] = []
    for i, raw in enumerate(data):
        if isinstance(raw, str):
            raise BackendError("engine layer information has layer names only", where=f"layer {i}",
                               value=raw[:80], fix=_NAMES_ONLY_FIX)
        if not isinstance(raw, Mapping):
            raise BackendError("engine layer information has a layer that is not an object",
                               where=f"layer {i}", value=type(raw).__name__, fix=_NAMES_ONLY_FIX)
        layer = dict(raw)
        layer["Name"] = str(layer.get("Name", f"<layer {i}>"))
        for key in ("Inputs", "Outputs", "Constants"):
            tensors = layer.get(key) or []
            if isinstance(tensors, Mapping):
                tensors = [tensors]
            layer[key] = [dict(t) if isinstance(t, Mapping) else {"Name": str(t)} for t in tensors]
        layers.append(layer)
    return layers


def layer_report(engine, *, path: str | os.PathLike | None = None) -> list[dict]:
    """Layers of a built engine (an ``ICudaEngine`` or an engine file path) from the engine
    inspector's JSON; the raw JSON is also written to ``path`` when given."""
    trt = require_tensorrt()
    runtime = None
    if isinstance(engine, (str, os.PathLike)):
        require_cuda_runtime()
        logger = trt_logger(trt)
        init_plugins(trt)
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(Path(engine).read_bytes())
        if engine is None:
            raise BackendError("TensorRT could not deserialize the engine: "
                               + errors_text(logger.take_errors(), "no error reported"),
                               fix="rebuild it (backend.rebuild=true)")
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    layers = parse_layer_info(text)
    if path is not None:
        atomic_write_text(Path(path), text)
    del inspector, runtime
    return layers


_INT8 = re.compile(r"(?<![A-Za-z])int8(?![A-Za-z0-9])", re.IGNORECASE)
_ONNX_LAYER = re.compile(r"\[ONNX Layer: (.*?)(?: \| [^\]]*)?\]")
_FORMAT_KEYS = ("Format/Datatype", "Datatype", "DataType", "Format", "Precision")


def onnx_nodes_of(layer: Mapping) -> list[str]:
    """ONNX node names TensorRT's parser recorded in a layer's ``Metadata``
    (``[ONNX Layer: name]`` entries, joined by \\x1e or \\x1f when layers fuse)."""
    meta = layer.get("Metadata")
    if not isinstance(meta, str):
        return []
    return [m.strip() for m in _ONNX_LAYER.findall(meta)]


def _tensor_format(tensor: Mapping) -> str:
    return " ".join(str(tensor[k]) for k in _FORMAT_KEYS if k in tensor)


def _is_reformat(layer: Mapping) -> bool:
    return (str(layer.get("LayerType", "")).lower() == "reformat"
            or layer["Name"].startswith("Reformatting CopyNode"))


def _is_opaque(layer: Mapping) -> bool:
    """Myelin-compiled regions: the inspector shows only their boundary tensors."""
    return layer["Name"].startswith("{ForeignNode") or "myelin" in str(layer.get("LayerType", "")).lower()


_NAME_SEPARATORS = re.compile(r" \+ |\.\.\.|\{ForeignNode\[|\]\}")


def _name_tokens(layer_name: str) -> list[str]:
    """``"a + b"`` -> [a, b]; ``"{ForeignNode[a...b]}"`` -> [a, b] (TensorRT's fused names)."""
    return [t.strip() for t in _NAME_SEPARATORS.split(layer_name) if t.strip()]


def _name_pattern(node: str) -> re.Pattern:
    # The node name as a whole word: not glued to name characters on either side, where "..."
    # (TensorRT's ellipsis in fused names) counts as a separator but a single "." does not.
    return re.compile(r"(?<![\w\-/])(?<!(?<!\.\.)\.)" + re.escape(node)
                      + r"(?![\w\-])(?!\.(?!\.\.))")


def _layers_for(node: str, layers: Sequence[Mapping]) -> tuple[list[Mapping], str | None]:
    compute = [l for l in layers if not _is_reformat(l)]
    by_meta = [l for l in compute if node in onnx_nodes_of(l)]
    if by_meta:
        return by_meta, "metadata"
    by_token = [l for l in compute if node in _name_tokens(l["Name"])]
    if by_token:
        return by_token, "name"
    pattern = _name_pattern(node)
    by_substring = [l for l in compute if pattern.search(l["Name"])]
    if by_substring:
        return by_substring, "name-substring"
    return [], None


#: Per-node statuses of :func:`check_int8_layers`, in report order (``dtype="fp8"``: the
#: same with fp8 in place of int8).
INT8_STATUSES = ("int8", "int8_output_only", "not_int8", "opaque", "not_found")

#: how the inspector names each quantized data type in a tensor's format ("Int8", "FP8":
#: TensorRT's DataType kINT8 / kFP8, e.g. "Row major linear FP8 format (kLINEAR)")
_DTYPE = {"int8": _INT8, "fp8": re.compile(r"(?<![A-Za-z])(fp8|float8|e4m3)", re.IGNORECASE)}


def check_int8_layers(layer_report: Sequence[Mapping] | Mapping | str,
                      planned_int8_nodes: Sequence[str], *, dtype: str = "int8") -> dict:
    """For each ONNX node planned INT8 (``dtype="fp8"``: FP8 E4M3): does TensorRT run it as
    a layer of that type?

    Layers are found by the ``[ONNX Layer: name]`` entries in ``Metadata``, else by the layer
    name (TensorRT names fused layers ``a + b``); Reformat layers never count. Per node
    (statuses for fp8 read ``fp8`` in place of ``int8``):

    - ``int8``: a matching layer reads Int8 data: an Int8 input, or (TensorRT 11 inspector)
      an Int8 entry in its ``Constants``;
    - ``int8_output_only``: matching layers write Int8 but read none (a GEMM/conv whose
      epilogue absorbed the *next* Quantize; the node itself computed in FP16/FP32);
    - ``opaque``: only Myelin regions matched and their boundary tensors show no Int8;
    - ``not_int8``, ``not_found``.

    ``ok`` is True when every planned node is ``int8``.
    """
    if dtype not in _DTYPE:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE)}, not {dtype!r}")
    pattern = _DTYPE[dtype]
    statuses = tuple(st.replace("int8", dtype) for st in INT8_STATUSES)
    reads, writes_only, not_it = statuses[0], statuses[1], statuses[2]
    layers = (parse_layer_info(layer_report)
              if isinstance(layer_report, (str, bytes, Mapping)) else parse_layer_info(list(layer_report)))
    nodes: dict[str, dict] = {}
    for node in planned_int8_nodes:
        matched, how = _layers_for(node, layers)
        q_inputs: list[str] = []
        q_outputs: list[str] = []
        formats: list[str] = []
        for layer in matched:
            for key in ("Inputs", "Constants", "Outputs"):
                for tensor in layer.get(key, []):
                    fmt = _tensor_format(tensor)
                    formats.append(f"{layer['Name']} {key[:-1].lower()} "
                                   f"{tensor.get('Name', '?')}: {fmt or 'unknown'}")
                    if pattern.search(fmt):
                        where = f"{layer['Name']}:{tensor.get('Name', '?')}"
                        (q_outputs if key == "Outputs" else q_inputs).append(where)
        if not matched:
            status = "not_found"
        elif q_inputs:
            status = reads
        elif q_outputs:
            status = writes_only
        elif all(_is_opaque(l) for l in matched):
            status = "opaque"
        else:
            status = not_it
        nodes[node] = {"status": status, "matched_by": how,
                       "layers": [l["Name"] for l in matched],
                       "layer_types": [str(l.get("LayerType", "")) for l in matched],
                       "tactics": [str(l.get("TacticName", "")) for l in matched
                                   if l.get("TacticName")],
                       f"{dtype}_tensors": q_inputs, f"{dtype}_outputs": q_outputs,
                       "formats": formats}
    counts = {st: sum(1 for v in nodes.values() if v["status"] == st) for st in statuses}
    result = {"ok": bool(nodes) and counts[reads] == len(nodes), "n_planned": len(nodes),
              **{f"n_{st}": n for st, n in counts.items()}, "nodes": nodes}
    log.info("%s layer check: %d/%d planned nodes read %s (%d write %s only, %d not, "
             "%d opaque, %d not found)", dtype.upper(), counts[reads], len(nodes),
             dtype.upper(), counts[writes_only], dtype.upper(), counts[not_it],
             counts["opaque"], counts["not_found"])
    return result
