"""A ModelProto parked in a private temporary file instead of in memory.

A run keeps several large graphs for later stages (each INT8 candidate's bias-corrected FP32
source, each candidate's FP16 emulation). Held as protos they stay resident for the whole
run (MiniLM: about 90 MB each); parked on disk they cost memory only while a stage uses
them. Loading a saved proto gives the same proto (serialization round-trip), so nothing
computed from it changes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

__all__ = ["KeptModel", "SpilledModel", "LazySpilledModel"]


class KeptModel:
    """A proto that stays in memory anyway (one of the run's own graphs): ``load()``
    returns it as is, without a copy."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.proto = proto

    def load(self) -> onnx.ModelProto:
        return self.proto


class SpilledModel:
    """``SpilledModel(proto)`` writes ``proto`` to a private temporary directory;
    ``load()`` (or calling it) reads it back. The directory goes away with the object."""

    def __init__(self, proto: onnx.ModelProto, *, name: str = "model") -> None:
        from quantkit.fsutil import atomic_path

        self._dir = tempfile.TemporaryDirectory(prefix="quantkit-spill-")
        self.path = Path(self._dir.name) / f"{name}.onnx"
        with atomic_path(self.path, durable=False) as tmp:  # scratch: no fsync
            onnx.save(proto, str(tmp))

    def load(self) -> onnx.ModelProto:
        return onnx.load(str(self.path))

    def __call__(self) -> onnx.ModelProto:
        return self.load()


class LazySpilledModel:
    """A zero-argument callable: the first call builds the proto with ``build()``, parks it
    on disk and returns it; later calls read it back from the file (no rebuild, and
    nothing held in memory between calls)."""

    def __init__(self, build: Callable[[], onnx.ModelProto], *, name: str = "model") -> None:
        self._build = build
        self._name = name
        self.spilled_: SpilledModel | None = None

    def __call__(self) -> onnx.ModelProto:
        if self.spilled_ is None:
            proto = self._build()
            self.spilled_ = SpilledModel(proto, name=self._name)
            self._build = None  # drop what the builder closed over
            return proto
        return self.spilled_.load()
