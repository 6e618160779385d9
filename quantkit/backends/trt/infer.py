"""What a run calls on ``backend=trt``: one preflight, one call per artifact's engine, the
runner for it, the numerics note. Takes the run's :class:`~quantkit.settings.Settings`; the
TensorRT part of it is ``settings.backend.trt`` (the one schema, ``backend.trt.*``).

    gpu = preflight(settings)                             # before any work
    build = build_for_run(settings, "model.int8.onnx", planned_int8_nodes)
    evidence["engine"] = build.to_record()
    with runner_for(settings, build, name="int8.mse") as r: ...
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from quantkit.backends.trt.availability import (GpuInfo, cuda_device_info, require_tensorrt)
from quantkit.backends.trt.build import EngineArtifact, build_engine, check_major
from quantkit.backends.trt.layers import check_int8_layers
from quantkit.backends.trt.profiles import shape_needs
from quantkit.backends.trt.runner import TrtRunner

log = logging.getLogger(__name__)


def engine_cache_dir(settings) -> Path:
    """``<cache_dir>/engines``: where engines (and, by default, timing caches) are kept."""
    from quantkit.assets import cache_root

    return cache_root(settings.cache_dir) / "engines"


def preflight(settings) -> GpuInfo:
    """One clear error before any work: tensorrt importable and of the pinned major, the CUDA
    runtime loadable, ``backend.trt.device`` a usable GPU."""
    trt = require_tensorrt()
    check_major(trt, settings.backend.trt)
    return cuda_device_info(settings.backend.trt.device)


@dataclass(frozen=True)
class EngineBuild:
    """One artifact's engine as the run used it; ``to_record()`` is what the record keeps."""

    artifact: EngineArtifact
    device: int
    tf32: bool
    int8_check: dict | None = None
    planned_int8: tuple[str, ...] = field(default=())
    fp8_check: dict | None = None
    planned_fp8: tuple[str, ...] = field(default=())

    @property
    def engine_path(self) -> Path:
        return self.artifact.engine_path

    def to_record(self) -> dict:
        a = self.artifact
        out = {"engine_path": str(a.engine_path), "meta": a.meta.to_dict(),
               "cache_hit": a.cache_hit, "trtexec": a.trtexec, "layers_path": str(a.layers_path),
               "device": self.device, "tf32": self.tf32,
               "engine_sha256": a.meta.engine_sha256}
        if self.int8_check is not None:
            out["int8_check"] = self.int8_check
        if self.fp8_check is not None:
            out["fp8_check"] = self.fp8_check
        return out


def build_for_run(settings, onnx_path: str | os.PathLike,
                  planned_int8: Sequence[str] | None = None, *,
                  planned_fp8: Sequence[str] | None = None,
                  cache_dir: str | os.PathLike | None = None,
                  debug_tensors: Sequence[str] = ()) -> EngineBuild:
    """The engine of one artifact: built (or reused) with ``settings.backend.trt`` on its
    device, its profile checked against every shape the run feeds, and, when INT8 (FP8)
    nodes are planned, the check of which of them TensorRT runs INT8 (FP8).
    ``debug_tensors``: build the separate debug engine with those ONNX tensors marked
    (per-layer run on TensorRT)."""
    t = settings.backend.trt
    art = build_engine(onnx_path, t, cache_dir=cache_dir or engine_cache_dir(settings),
                       needs=shape_needs(settings), debug_tensors=debug_tensors)
    check = fp8_check = None
    if planned_int8 or planned_fp8:
        report = art.layers_path.read_text()
        if planned_int8:
            check = check_int8_layers(report, list(planned_int8))
        if planned_fp8:
            fp8_check = check_int8_layers(report, list(planned_fp8), dtype="fp8")
    return EngineBuild(artifact=art, device=t.device, tf32=bool(t.tf32), int8_check=check,
                       planned_int8=tuple(planned_int8 or ()), fp8_check=fp8_check,
                       planned_fp8=tuple(planned_fp8 or ()))


def runner_for(settings, engine: EngineBuild | Mapping, *, name: str,
               debug: bool = False) -> TrtRunner:
    """A :class:`TrtRunner` on ``backend.trt.device`` for an engine (an ``EngineBuild`` or its
    record); ``debug=True`` for a debug engine: ``infer(feed, names)`` then returns its debug
    tensors by name (a drop-in for the ORT debug runner of ``compare.layerwise``)."""
    path = engine.engine_path if isinstance(engine, EngineBuild) else engine["engine_path"]
    return TrtRunner(path, name=name, device=settings.backend.trt.device, debug=debug)


def engine_numerics_note(name: str, settings) -> str:
    """The record's numerics line for an artifact evaluated as a TensorRT engine."""
    t = settings.backend.trt
    tf32 = ("TF32 allowed (backend.trt.tf32=true): FP32-typed MatMul/Conv layers may round "
            "inputs to 10-bit mantissas on Ampere and later" if t.tf32 else
            "TF32 off: FP32-typed layers compute in IEEE FP32")
    return (f"{name} artifact built into a strongly typed TensorRT engine on GPU {t.device} "
            f"(precision from the graph; no precision builder flags; {tf32})")
