"""The ONNX file an engine is built from: read it without weights, hash it with its external data."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import onnx

from quantkit.errors import BackendError, first_line


def load_onnx(onnx_path: str | os.PathLike) -> onnx.ModelProto:
    """The ONNX graph without its external weights (enough for shapes, names and hashing)."""
    onnx_path = Path(onnx_path)
    if not onnx_path.is_file():
        raise BackendError("ONNX model not found", where=str(onnx_path),
                           fix="check the path (the Q/DQ ONNX written by the qdq stage)")
    try:
        return onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise BackendError("could not read the ONNX model", where=str(onnx_path),
                           value=first_line(exc),
                           fix="check the file is an ONNX model (onnx.checker)") from exc


def _all_tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    """Initializers and constant attributes of a graph and all its subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def _update_from_file(digest, path: Path) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


def onnx_sha256(onnx_path: str | os.PathLike, model: onnx.ModelProto | None = None) -> str:
    """sha256 over the ONNX file and, in order, any external-data files its tensors use."""
    onnx_path = Path(onnx_path)
    digest = hashlib.sha256()
    _update_from_file(digest, onnx_path)
    if model is None:
        model = load_onnx(onnx_path)
    locations: list[str] = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            loc = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if loc and loc not in locations:
                locations.append(loc)
    for loc in locations:
        digest.update(loc.encode())
        _update_from_file(digest, onnx_path.parent / loc)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
