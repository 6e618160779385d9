"""What a TensorRT engine was built from and for: metadata beside every engine, and the cache key.

A serialized TensorRT engine only runs on the GPU model and the TensorRT version that built
it (TensorRT developer guide: plans are specific to the GPU they were built on, the platform
and the TensorRT version). Every engine quantkit writes therefore carries an ``EngineMeta``
JSON file beside it; loading checks it first and refuses a mismatch with the fix, instead of
letting TensorRT fail deep inside ``deserialize_cuda_engine``.

Pure Python (json, hashlib): no tensorrt, no GPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from quantkit.errors import BackendError

log = logging.getLogger(__name__)

#: Bumped when the meaning of a field or of the cache key changes; old engines then rebuild.
SCHEMA_VERSION = 1

_REQUIRED = ("tensorrt_version", "gpu_name", "compute_capability", "onnx_sha256",
             "settings_sha256", "created")


def canonical_json(value: object) -> str:
    """Deterministic JSON (sorted keys, no whitespace): the text every hash here is taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=_jsonable)


def _jsonable(value: object) -> object:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON-serializable for hashing: {type(value).__name__}")


def settings_sha256(settings: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of the build settings that shape the engine."""
    return hashlib.sha256(canonical_json(dict(settings)).encode()).hexdigest()


def format_compute_capability(cc: str | Sequence[int]) -> str:
    """``(8, 6)``, ``"8.6"`` or ``"sm_86"`` -> ``"8.6"``."""
    if isinstance(cc, str):
        text = cc.strip()
        if text.startswith("sm_") and text[3:].isdigit() and len(text) >= 5:
            return f"{text[3:-1]}.{text[-1]}"
        major, sep, minor = text.partition(".")
        if sep and major.isdigit() and minor.isdigit():
            return f"{int(major)}.{int(minor)}"
        raise BackendError("compute capability is not of the form MAJOR.MINOR", value=cc,
                           fix="pass e.g. '8.6' or (8, 6)")
    major, minor = (int(v) for v in cc)
    return f"{major}.{minor}"


def sm_name(cc: str | Sequence[int]) -> str:
    """``"8.6"`` -> ``"sm_86"`` (the architecture name NVIDIA's tools print)."""
    major, minor = format_compute_capability(cc).split(".")
    return f"sm_{major}{minor}"


def engine_cache_key(onnx_sha256: str, settings_dict: Mapping[str, object], trt_version: str,
                     gpu_name: str, cc: str | Sequence[int]) -> str:
    """sha256 over everything an engine depends on: the ONNX bytes, the build settings, the
    TensorRT version, the GPU model and its compute capability. Equal keys -> reusable engine."""
    payload = {
        "schema": SCHEMA_VERSION,
        "onnx_sha256": onnx_sha256,
        "settings": dict(settings_dict),
        "tensorrt_version": str(trt_version),
        "gpu_name": str(gpu_name),
        "compute_capability": format_compute_capability(cc),
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class EngineFile:
    """The TensorRT engine an evaluation ran on (backend=trt): its file and its sha256, read
    once from the engine record (``EngineBuild.to_record()``) that the evaluation cache keeps."""

    path: str
    sha256: str | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, object] | None) -> "EngineFile | None":
        if not record or not record.get("engine_path"):
            return None
        sha = record.get("engine_sha256")
        return cls(path=str(record["engine_path"]), sha256=None if sha is None else str(sha))


@dataclass
class EngineMeta:
    """Provenance of one serialized engine; stored as JSON beside it."""

    tensorrt_version: str
    gpu_name: str
    compute_capability: str  # "MAJOR.MINOR", e.g. "8.6"
    onnx_sha256: str
    settings_sha256: str
    created: str  # ISO-8601 UTC
    engine_sha256: str = ""
    cache_key: str = ""
    settings: dict = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        self.compute_capability = format_compute_capability(self.compute_capability)

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, object], *, where: str | None = None) -> "EngineMeta":
        if not isinstance(data, Mapping):
            raise BackendError("engine metadata is not a JSON object", where=where,
                               value=type(data).__name__, fix=_REBUILD_FIX)
        missing = [k for k in _REQUIRED if k not in data]
        if missing:
            raise BackendError("engine metadata lacks a required field", where=where,
                               value=missing[0], fix=_REBUILD_FIX)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            log.debug("ignoring unknown engine metadata fields %s (%s)", unknown, where)
        kwargs = {k: v for k, v in data.items() if k in known}
        for k in _REQUIRED:
            if not isinstance(kwargs[k], str):
                raise BackendError(f"engine metadata field {k!r} is not a string", where=where,
                                   value=kwargs[k], fix=_REBUILD_FIX)
        if not isinstance(kwargs.get("settings", {}), dict):
            raise BackendError("engine metadata field 'settings' is not an object", where=where,
                               value=kwargs["settings"], fix=_REBUILD_FIX)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str, *, where: str | None = None) -> "EngineMeta":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BackendError("engine metadata is not valid JSON", where=where,
                               value=f"{exc.msg} (line {exc.lineno}, column {exc.colno})",
                               fix=_REBUILD_FIX) from exc
        return cls.from_dict(data, where=where)

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temp file + rename), so a crash never leaves half a file."""
        from quantkit.fsutil import atomic_write_text

        return atomic_write_text(path, self.to_json())


_REBUILD_FIX = "rebuild the engine (delete it and its .meta.json, or run with backend.rebuild=true)"


def meta_path_for(engine_path: str | os.PathLike) -> Path:
    """``model.engine`` -> ``model.meta.json`` (the metadata file beside an engine)."""
    p = Path(engine_path)
    return p.with_name(f"{p.stem}.meta.json")


def load_meta(path: str | os.PathLike) -> EngineMeta:
    """Read an ``EngineMeta`` JSON file; missing or corrupt files raise ``BackendError`` with the fix."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise BackendError("engine metadata file not found", where=str(path),
                           fix=_REBUILD_FIX) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BackendError(f"engine metadata file could not be read: {exc}", where=str(path),
                           fix=_REBUILD_FIX) from exc
    return EngineMeta.from_json(text, where=str(path))


def check_compatible(meta: EngineMeta, *, tensorrt_version: str, gpu_name: str,
                     compute_capability: str | Sequence[int],
                     engine_path: str | os.PathLike | None = None) -> None:
    """Refuse an engine built for another GPU model, compute capability or TensorRT version."""
    cc_here = format_compute_capability(compute_capability)
    same = (meta.tensorrt_version == str(tensorrt_version)
            and meta.gpu_name == str(gpu_name)
            and meta.compute_capability == cc_here)
    if same:
        return
    target = f"delete {engine_path}" if engine_path is not None else "delete the engine"
    raise BackendError(
        f"engine was built for {meta.gpu_name} ({sm_name(meta.compute_capability)}) with "
        f"TensorRT {meta.tensorrt_version}; this machine has {gpu_name} ({sm_name(cc_here)})"
        f"/TensorRT {tensorrt_version}",
        fix=f"rebuild the engine ({target} or run with backend.rebuild=true)")
