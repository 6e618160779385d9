"""TensorRT backend: build strongly typed engines from Q/DQ ONNX, run them, inspect their layers.

``tensorrt`` is imported lazily, inside the functions that need it (``require_tensorrt``):
``import quantkit.backends.trt`` works on any machine, and everything that does not touch a
GPU (optimization profiles, the trtexec command, the layer-report parser, engine metadata) is
plain Python tested on CPU.

TensorRT versions. quantkit needs TensorRT >= 10 (the I/O tensor API and strongly typed
networks). Precision lives in the ONNX graph (Q/DQ + FP16 casts), so no precision builder flag
is ever set:

- 10.x: the network is created with ``1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)``;
- 11.x: every network is strongly typed; the flag is deprecated and ignored, so none is passed.

Running. ``TrtRunner`` drives the TensorRT 10+ I/O tensor API itself (``set_input_shape``,
``set_tensor_address``, ``execute_async_v3``) over device buffers and a stream from
``polygraphy.cuda`` (ctypes over libcudart; polygraphy is already a dependency). Polygraphy's
own ``TrtRunner`` was considered: it returns arrays that alias host buffers reused by the next
``infer`` call and attaches a debug-tensor listener by default; ours returns fresh arrays and
raises quantkit errors that name the tensor and the fix.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from quantkit.backends.engine_meta import (EngineMeta, check_compatible, engine_cache_key,
                                           load_meta, meta_path_for, settings_sha256, utc_now)
from quantkit.errors import BackendError, BackendUnavailable, ConfigError

log = logging.getLogger(__name__)

#: Oldest TensorRT major version quantkit builds with (I/O tensor API, strongly typed networks).
MIN_TENSORRT_MAJOR = 10

INSTALL_FIX = ("Install tensorrt on a machine with an NVIDIA GPU (pip install -e '.[tensorrt]'), "
               "or use backend=ort")

#: Bumped when build_engine's recipe changes in a way that changes engines (invalidates caches).
BUILD_RECIPE = 1

Shape = tuple[int, ...]
Profile = tuple[Shape, Shape, Shape]


class ProfileError(BackendError, ConfigError):
    """An input's optimization-profile shape is missing or invalid: a configuration problem the
    TensorRT backend finds. Catchable as ``BackendError`` and as ``ConfigError``."""


# --------------------------------------------------------------------------------------------
# Availability: tensorrt and the CUDA runtime
# --------------------------------------------------------------------------------------------

def tensorrt_major(version: str) -> int:
    """``"10.8.0.43"`` -> 10."""
    head = str(version).split(".", 1)[0]
    if not head.isdigit():
        raise BackendUnavailable("unrecognised tensorrt version string", value=version,
                                 fix=INSTALL_FIX)
    return int(head)


def require_tensorrt():
    """The ``tensorrt`` module (>= 10), or ``BackendUnavailable`` saying how to get it."""
    try:
        import tensorrt as trt
    except ModuleNotFoundError as exc:
        if (exc.name or "tensorrt").split(".")[0] == "tensorrt":
            raise BackendUnavailable("tensorrt is not installed (needed by backend=trt)",
                                     fix=INSTALL_FIX) from exc
        raise BackendUnavailable(
            "tensorrt is installed but could not be imported (needed by backend=trt)",
            value=str(exc).splitlines()[0],
            fix="reinstall it with its libraries (pip install -e '.[tensorrt]') on a machine "
                "with an NVIDIA GPU, or use backend=ort") from exc
    except (ImportError, OSError) as exc:  # a wheel whose libnvinfer cannot be loaded
        raise BackendUnavailable(
            "tensorrt is installed but could not be imported (needed by backend=trt)",
            value=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            fix="reinstall it with its libraries (pip install -e '.[tensorrt]') on a machine "
                "with an NVIDIA GPU, or use backend=ort") from exc
    version = getattr(trt, "__version__", "unknown")
    if tensorrt_major(version) < MIN_TENSORRT_MAJOR:
        raise BackendUnavailable(
            f"tensorrt {version} is too old: quantkit needs TensorRT >= {MIN_TENSORRT_MAJOR} "
            "(I/O tensor API, strongly typed networks)",
            fix=f"pip install -U 'tensorrt>={MIN_TENSORRT_MAJOR}', or use backend=ort")
    return trt


_CUDART_FIX = ("install the CUDA runtime (pip install nvidia-cuda-runtime-cu12, or the CUDA "
               "toolkit with libcudart on LD_LIBRARY_PATH) on a machine with an NVIDIA GPU, "
               "or use backend=ort")


def _cudart():
    """libcudart as a ``ctypes.CDLL``, loaded the way polygraphy.cuda finds it."""
    try:
        from polygraphy import cuda as pcuda

        return pcuda.wrapper().handle
    except Exception as exc:  # ImportError, OSError from ctypes, PolygraphyException
        raise BackendUnavailable("the CUDA runtime (libcudart) could not be loaded "
                                 "(needed by backend=trt)",
                                 value=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                 fix=_CUDART_FIX) from exc


def _cuda_error(lib, status: int) -> str:
    try:
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        return (f"{lib.cudaGetErrorName(status).decode()}: "
                f"{lib.cudaGetErrorString(status).decode()}")
    except (AttributeError, OSError):
        return f"cudaError {status}"


@dataclass(frozen=True)
class GpuInfo:
    """The GPU an engine is built for / runs on."""

    index: int
    name: str
    compute_capability: str  # "MAJOR.MINOR"


_DEV_ATTR_CC_MAJOR = 75  # cudaDevAttrComputeCapabilityMajor (driver_types.h)
_DEV_ATTR_CC_MINOR = 76  # cudaDevAttrComputeCapabilityMinor
_DEVICE_PROP_BYTES = 16384  # larger than cudaDeviceProp in any CUDA version; name[256] is first


def cuda_device_info(device: int = 0) -> GpuInfo:
    """Name and compute capability of CUDA device ``device``, or ``BackendUnavailable``."""
    lib = _cudart()
    count = ctypes.c_int(0)
    status = lib.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        reason = _cuda_error(lib, status) if status != 0 else "0 devices"
        raise BackendUnavailable("no usable NVIDIA GPU (needed by backend=trt)", value=reason,
                                 fix="run on a machine with an NVIDIA GPU and a driver that "
                                     "supports this CUDA runtime (nvidia-smi must list the GPU), "
                                     "or use backend=ort")
    if not 0 <= device < count.value:
        raise BackendUnavailable("CUDA device index out of range", value=device,
                                 fix=f"choose a device in 0..{count.value - 1}")
    cc = []
    for attr in (_DEV_ATTR_CC_MAJOR, _DEV_ATTR_CC_MINOR):
        value = ctypes.c_int(0)
        status = lib.cudaDeviceGetAttribute(ctypes.byref(value), attr, device)
        if status != 0:
            raise BackendUnavailable("could not query the GPU's compute capability",
                                     value=_cuda_error(lib, status), fix=_CUDART_FIX)
        cc.append(value.value)
    props = ctypes.create_string_buffer(_DEVICE_PROP_BYTES)
    getter = getattr(lib, "cudaGetDeviceProperties_v2", None) or lib.cudaGetDeviceProperties
    status = getter(props, device)
    if status != 0:
        raise BackendUnavailable("could not query the GPU's properties",
                                 value=_cuda_error(lib, status), fix=_CUDART_FIX)
    name = props.raw[:256].split(b"\0", 1)[0].decode("ascii", "replace").strip()
    return GpuInfo(index=device, name=name, compute_capability=f"{cc[0]}.{cc[1]}")


def _use_device(device: int) -> None:
    """Make ``device`` the calling thread's current CUDA device (TensorRT builds and runs there)."""
    lib = _cudart()
    status = lib.cudaSetDevice(device)
    if status != 0:
        raise BackendUnavailable("could not select the CUDA device", value=device,
                                 fix=f"check the device index ({_cuda_error(lib, status)})")


def require_cuda_runtime():
    """``polygraphy.cuda`` (DeviceArray, Stream) once libcudart loads and a GPU is usable."""
    cuda_device_info()
    from polygraphy import cuda as pcuda

    return pcuda


# --------------------------------------------------------------------------------------------
# Settings and optimization profiles (pure Python)
# --------------------------------------------------------------------------------------------

def _as_shape(value: object, *, where: str) -> Shape:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ProfileError("a shape must be a list of integers", where=where, value=value,
                           fix="write it like [1, 128]")
    dims = list(value)
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise ProfileError("a shape must be a list of integers", where=where, value=value,
                           fix="write it like [1, 128]")
    return tuple(int(d) for d in dims)


def _as_range(value: object, *, where: str) -> tuple[int, int, int]:
    rng = _as_shape(value, where=where)
    if len(rng) != 3 or not 1 <= rng[0] <= rng[1] <= rng[2]:
        raise ProfileError("a dimension range must be [min, opt, max] with 1 <= min <= opt <= max",
                           where=where, value=value, fix="e.g. [1, 128, 512]")
    return rng  # type: ignore[return-value]


@dataclass
class EngineSettings:
    """How to build one engine. Shapes: the batch dim (axis 0) takes min/opt/max_batch, every
    other dynamic dim takes the sequence range, unless ``dim_overrides`` (by the ONNX dim name,
    e.g. ``"height"``) or ``shape_overrides`` (by input name: ``[min_shape, opt_shape,
    max_shape]``) say otherwise."""

    workspace_mb: int = 4096
    min_batch: int = 1
    opt_batch: int = 8
    max_batch: int = 64
    min_sequence: int = 1
    opt_sequence: int | None = None
    max_sequence: int | None = None
    dim_overrides: dict[str, Sequence[int]] = field(default_factory=dict)
    shape_overrides: dict[str, Sequence[Sequence[int]]] = field(default_factory=dict)
    timing_cache: str | None = None
    builder_optimization_level: int = 3
    tensorrt_major: int | None = None  # e.g. 10 or 11; None accepts any >= 10

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"backend.{name} must be a positive integer",
                                  where=f"backend.{name}", value=value, fix="e.g. 1")

        for name in ("workspace_mb", "min_batch", "opt_batch", "max_batch", "min_sequence"):
            positive(name)
        if not self.min_batch <= self.opt_batch <= self.max_batch:
            raise ConfigError("batch range must satisfy min_batch <= opt_batch <= max_batch",
                              where="backend.min_batch/opt_batch/max_batch",
                              value=(self.min_batch, self.opt_batch, self.max_batch),
                              fix="e.g. min_batch=1 opt_batch=8 max_batch=64")
        if (self.opt_sequence is None) != (self.max_sequence is None):
            raise ConfigError("set both backend.opt_sequence and backend.max_sequence, or neither",
                              where="backend.opt_sequence/max_sequence",
                              value=(self.opt_sequence, self.max_sequence),
                              fix="e.g. opt_sequence=128 max_sequence=512")
        if self.opt_sequence is not None:
            positive("opt_sequence")
            positive("max_sequence")
            if not self.min_sequence <= self.opt_sequence <= self.max_sequence:
                raise ConfigError("sequence range must satisfy min <= opt <= max",
                                  where="backend.min_sequence/opt_sequence/max_sequence",
                                  value=(self.min_sequence, self.opt_sequence, self.max_sequence),
                                  fix="e.g. min_sequence=1 opt_sequence=128 max_sequence=512")
        lvl = self.builder_optimization_level
        if not isinstance(lvl, int) or isinstance(lvl, bool) or not 0 <= lvl <= 5:
            raise ConfigError("backend.builder_optimization_level must be an integer in 0..5",
                              where="backend.builder_optimization_level", value=lvl,
                              fix="3 is TensorRT's default; 5 searches longest")
        major = self.tensorrt_major
        if major is not None and (not isinstance(major, int) or major < MIN_TENSORRT_MAJOR):
            raise ConfigError(f"backend.tensorrt_major must be >= {MIN_TENSORRT_MAJOR} or null",
                              where="backend.tensorrt_major", value=major, fix="10, 11 or null")
        self.dim_overrides = {str(k): _as_range(v, where=f"backend.dim_overrides.{k}")
                              for k, v in dict(self.dim_overrides).items()}
        overrides: dict[str, Profile] = {}
        for name, shapes in dict(self.shape_overrides).items():
            where = f"backend.shape_overrides.{name}"
            if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Iterable):
                raise ProfileError("a shape override must be [min_shape, opt_shape, max_shape]",
                                   where=where, value=shapes, fix="e.g. [[1, 16], [8, 128], [64, 512]]")
            triple = [_as_shape(s, where=where) for s in shapes]
            if len(triple) != 3 or len({len(s) for s in triple}) != 1:
                raise ProfileError("a shape override must be three shapes of equal rank "
                                   "[min_shape, opt_shape, max_shape]", where=where, value=shapes,
                                   fix="e.g. [[1, 16], [8, 128], [64, 512]]")
            if not all(1 <= a <= b <= c for a, b, c in zip(*triple)):
                raise ProfileError("shape override dims must satisfy 1 <= min <= opt <= max",
                                   where=where, value=shapes, fix="e.g. [[1, 16], [8, 128], [64, 512]]")
            overrides[str(name)] = (triple[0], triple[1], triple[2])
        self.shape_overrides = overrides

    def key_dict(self, profiles: Mapping[str, Profile]) -> dict:
        """What the engine depends on (the resolved profiles, not the knobs that produced them;
        the timing-cache path only speeds the build up and is left out)."""
        return {
            "recipe": BUILD_RECIPE,
            "strongly_typed": True,
            "profiling_verbosity": "detailed",
            "workspace_mb": self.workspace_mb,
            "builder_optimization_level": self.builder_optimization_level,
            "tensorrt_major": self.tensorrt_major,
            "profiles": {name: [list(s) for s in shapes] for name, shapes in profiles.items()},
        }


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def _dynamic_range(input_name: str, axis: int, dim_name: str,
                   settings: EngineSettings) -> tuple[int, int, int]:
    if dim_name and dim_name in settings.dim_overrides:
        return tuple(settings.dim_overrides[dim_name])  # type: ignore[return-value]
    if axis == 0:
        return settings.min_batch, settings.opt_batch, settings.max_batch
    if settings.opt_sequence is not None and settings.max_sequence is not None:
        return settings.min_sequence, settings.opt_sequence, settings.max_sequence
    label = f"{dim_name!r}" if dim_name else "unnamed"
    override = dim_name or "<dim name>"
    raise ProfileError(
        f"input {input_name!r} dim {axis} ({label}) is dynamic and has no profile value",
        where=f"input {input_name}", value=dim_name or f"dim {axis}",
        fix=f"set backend.opt_sequence and backend.max_sequence, "
            f"backend.dim_overrides.{override}=[min, opt, max], or "
            f"backend.shape_overrides.{input_name}=[min_shape, opt_shape, max_shape]")


def profiles_from_model(model: onnx.ModelProto, settings: EngineSettings) -> dict[str, Profile]:
    """``{input: (min_shape, opt_shape, max_shape)}`` for every graph input with a dynamic dim.

    Static dims are copied; the batch dim (axis 0) takes min/opt/max_batch; other dynamic dims
    take ``dim_overrides[dim_name]`` or the sequence range; ``shape_overrides[input]`` replaces
    the whole triple (it must agree with the static dims). Inputs with only static dims need no
    profile and are left out. A dynamic dim with no value raises ``ProfileError`` naming it.
    """
    inputs = _graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(settings.shape_overrides) - set(names))
    if unknown:
        raise ProfileError("backend.shape_overrides names an input the model does not have",
                           where="backend.shape_overrides", value=unknown[0],
                           fix=f"use one of the model inputs {names}")
    profiles: dict[str, Profile] = {}
    for vi in inputs:
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            raise ProfileError(f"input {name!r} is not a tensor", where=f"input {name}",
                               fix="TensorRT takes tensor inputs only; export the model with tensors")
        tensor = vi.type.tensor_type
        override = settings.shape_overrides.get(name)
        if not tensor.HasField("shape"):
            if override is None:
                raise ProfileError(f"input {name!r} has no shape (unknown rank)",
                                   where=f"input {name}",
                                   fix=f"set backend.shape_overrides.{name}=[min_shape, opt_shape, "
                                       "max_shape] or export the model with input shapes")
            profiles[name] = override
            continue
        dims = list(tensor.shape.dim)
        static = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                  for d in dims]
        if override is not None:
            if len(override[0]) != len(dims):
                raise ProfileError(f"shape override for input {name!r} has rank {len(override[0])}; "
                                   f"the model input has rank {len(dims)}",
                                   where=f"backend.shape_overrides.{name}", value=override,
                                   fix=f"give {len(dims)} dims per shape")
            for axis, value in enumerate(static):
                if value is not None and any(s[axis] != value for s in override):
                    raise ProfileError(f"shape override for input {name!r} changes static dim "
                                       f"{axis} (= {value})",
                                       where=f"backend.shape_overrides.{name}", value=override,
                                       fix=f"keep dim {axis} at {value} in min, opt and max")
            if any(v is None for v in static):
                profiles[name] = override
            continue
        if all(v is not None for v in static):
            continue
        lo, mid, hi = [], [], []
        for axis, (d, value) in enumerate(zip(dims, static)):
            if value is None:
                a, b, c = _dynamic_range(name, axis, d.dim_param, settings)
            else:
                a = b = c = value
            lo.append(a)
            mid.append(b)
            hi.append(c)
        profiles[name] = (tuple(lo), tuple(mid), tuple(hi))
    return profiles


# --------------------------------------------------------------------------------------------
# trtexec equivalent (pure Python)
# --------------------------------------------------------------------------------------------

def _trtexec_name(name: str) -> str:
    # trtexec splits shape specs on ',' and ':'; such names go in single quotes.
    return f"'{name}'" if any(c in name for c in ",: ") else name


def _shape_spec(profiles: Mapping[str, Profile], which: int) -> str:
    return ",".join(f"{_trtexec_name(name)}:{'x'.join(str(d) for d in shapes[which])}"
                    for name, shapes in profiles.items())


def trtexec_command(onnx_path: str | os.PathLike, settings: EngineSettings, *,
                    engine_path: str | os.PathLike | None = None,
                    layer_info_path: str | os.PathLike | None = None,
                    model: onnx.ModelProto | None = None) -> str:
    """The ``trtexec`` command line that builds the same engine as ``build_engine``.

    ``--stronglyTyped`` is required on TensorRT 10 and accepted (ignored) on 11; no precision
    flag is ever passed. The engine goes to ``engine_path`` (default: the ONNX path with
    ``.engine``).
    """
    onnx_path = Path(onnx_path)
    if model is None:
        model = _load_onnx(onnx_path)
    profiles = profiles_from_model(model, settings)
    engine_path = Path(engine_path) if engine_path is not None else onnx_path.with_suffix(".engine")
    args = ["trtexec", f"--onnx={onnx_path}", "--stronglyTyped"]
    if profiles:
        args += [f"--minShapes={_shape_spec(profiles, 0)}",
                 f"--optShapes={_shape_spec(profiles, 1)}",
                 f"--maxShapes={_shape_spec(profiles, 2)}"]
    args += [f"--memPoolSize=workspace:{settings.workspace_mb}M",
             f"--builderOptimizationLevel={settings.builder_optimization_level}",
             "--profilingVerbosity=detailed"]
    if settings.timing_cache:
        args.append(f"--timingCacheFile={settings.timing_cache}")
    args.append(f"--saveEngine={engine_path}")
    if layer_info_path is not None:
        args.append(f"--exportLayerInfo={layer_info_path}")
    args.append("--skipInference")
    return " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _logger_class(trt):
    class _Logger(trt.ILogger):
        """Routes TensorRT messages to ``logging`` and keeps the errors for our exceptions."""

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity, msg) -> None:  # called by TensorRT
            if severity in (trt.ILogger.INTERNAL_ERROR, trt.ILogger.ERROR):
                self.errors.append(str(msg))
                log.error("TensorRT: %s", msg)
            elif severity == trt.ILogger.WARNING:
                log.warning("TensorRT: %s", msg)
            elif severity == trt.ILogger.INFO:
                log.info("TensorRT: %s", msg)

        def take_errors(self) -> list[str]:
            errors, self.errors = self.errors, []
            return errors

    return _Logger


@functools.lru_cache(maxsize=1)
def _trt_logger(trt):
    # One logger for the process: it must outlive every builder, runtime and engine made with it.
    return _logger_class(trt)()


@functools.lru_cache(maxsize=1)
def _init_plugins(trt) -> None:
    """Register TensorRT's bundled plugins once (the ONNX parser maps some ops onto them)."""
    init = getattr(trt, "init_libnvinfer_plugins", None)  # absent from lean/dispatch builds
    if init is None:
        log.debug("tensorrt %s has no init_libnvinfer_plugins; plugins not registered",
                  trt.__version__)
    elif not init(_trt_logger(trt), ""):
        log.warning("TensorRT's plugin library could not be initialised; ops that need a "
                    "plugin will fail to parse")


def _errors_text(errors: Sequence[str], default: str) -> str:
    return " | ".join(e.strip() for e in errors if e.strip()) or default


def _network_flags(trt) -> int:
    """STRONGLY_TYPED on TensorRT 10 (required); nothing on 11+ (always strongly typed)."""
    if tensorrt_major(trt.__version__) >= 11:
        return 0
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    if flag is None:
        raise BackendUnavailable(f"tensorrt {trt.__version__} has no STRONGLY_TYPED network flag",
                                 fix=f"pip install -U 'tensorrt>={MIN_TENSORRT_MAJOR}'")
    return 1 << int(flag)


def _parser_error_text(err) -> str:
    try:
        node_name, op, desc = err.node_name(), err.node_operator(), err.desc()
    except AttributeError:  # older bindings without node_name()/node_operator()
        return str(err).strip()
    where = f"node {node_name!r} ({op})" if node_name else f"node #{err.node()}"
    return f"{where}: {desc}"


def _load_onnx(onnx_path: Path) -> onnx.ModelProto:
    """The ONNX graph without its external weights (enough for shapes, names and hashing)."""
    if not onnx_path.is_file():
        raise BackendError("ONNX model not found", where=str(onnx_path),
                           fix="check the path (the Q/DQ ONNX written by the qdq stage)")
    try:
        return onnx.load(str(onnx_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise BackendError("could not read the ONNX model", where=str(onnx_path),
                           value=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
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


def onnx_sha256(onnx_path: str | os.PathLike, model: onnx.ModelProto | None = None) -> str:
    """sha256 over the ONNX file and, in order, any external-data files its tensors use."""
    onnx_path = Path(onnx_path)
    digest = hashlib.sha256()
    with open(onnx_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if model is None:
        model = _load_onnx(onnx_path)
    locations: list[str] = []
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            loc = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if loc and loc not in locations:
                locations.append(loc)
    for loc in locations:
        path = onnx_path.parent / loc
        digest.update(loc.encode())
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_atomic(path: Path, data: bytes | str) -> None:
    from quantkit.fsutil import atomic_write_bytes, atomic_write_text

    (atomic_write_text if isinstance(data, str) else atomic_write_bytes)(path, data)


@dataclass(frozen=True)
class EngineArtifact:
    """A built (or reused) engine and the files beside it."""

    engine_path: Path
    meta_path: Path
    layers_path: Path
    meta: EngineMeta
    cache_hit: bool
    trtexec: str  # the equivalent command line, for the report


def _check_major(trt, settings: EngineSettings) -> None:
    have = tensorrt_major(trt.__version__)
    if settings.tensorrt_major is not None and settings.tensorrt_major != have:
        raise BackendUnavailable(f"this run targets TensorRT {settings.tensorrt_major}.x but "
                                 f"tensorrt {trt.__version__} is installed",
                                 where="backend.tensorrt_major", value=settings.tensorrt_major,
                                 fix=f"install tensorrt=={settings.tensorrt_major}.* or set "
                                     f"backend.tensorrt_major={have} (or null)")


def _cached(engine_path: Path, meta_path: Path, layers_path: Path, *, trt_version: str,
            gpu: GpuInfo) -> EngineMeta | None:
    if not (engine_path.is_file() and meta_path.is_file() and layers_path.is_file()):
        return None
    try:
        meta = load_meta(meta_path)
        check_compatible(meta, tensorrt_version=trt_version, gpu_name=gpu.name,
                         compute_capability=gpu.compute_capability, engine_path=engine_path)
    except BackendError as exc:
        log.warning("cached engine %s not reusable (%s); rebuilding", engine_path, exc)
        return None
    if meta.engine_sha256 != _sha256_bytes(engine_path.read_bytes()):
        log.warning("cached engine %s does not match its metadata hash; rebuilding", engine_path)
        return None
    return meta


def _timing_cache(config, path: str | None):
    """Load the timing cache at ``path`` (or start an empty one) and attach it to ``config``."""
    data = b""
    if path and Path(path).is_file():
        data = Path(path).read_bytes()
    cache = config.create_timing_cache(data)
    if cache is None and data:
        log.warning("timing cache %s could not be read; starting an empty one", path)
        cache = config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        log.warning("timing cache %s was made on another GPU/TensorRT; starting an empty one", path)
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def build_engine(onnx_path: str | os.PathLike, settings: EngineSettings, *,
                 cache_dir: str | os.PathLike, rebuild: bool = False,
                 device: int = 0) -> EngineArtifact:
    """Build a strongly typed engine from a Q/DQ ONNX file, or reuse the cached one.

    The cache entry ``cache_dir/<key>/`` is keyed by sha256 of the ONNX bytes, the build
    settings (with resolved profiles), the TensorRT version, the GPU name and its compute
    capability; it holds ``model.engine``, ``model.meta.json`` (``EngineMeta``) and
    ``model.layers.json`` (the engine inspector's JSON). ``rebuild=True`` ignores a cache hit.
    """
    onnx_path = Path(onnx_path)
    model = _load_onnx(onnx_path)
    trt = require_tensorrt()
    _check_major(trt, settings)
    gpu = cuda_device_info(device)
    _use_device(device)
    profiles = profiles_from_model(model, settings)
    onnx_digest = onnx_sha256(onnx_path, model)
    key_settings = settings.key_dict(profiles)
    key = engine_cache_key(onnx_digest, key_settings, trt.__version__, gpu.name,
                           gpu.compute_capability)
    out_dir = Path(cache_dir) / key[:24]
    engine_path = out_dir / "model.engine"
    meta_path = meta_path_for(engine_path)
    layers_path = out_dir / "model.layers.json"
    command = trtexec_command(onnx_path, settings, engine_path=engine_path,
                              layer_info_path=layers_path, model=model)

    if not rebuild:
        meta = _cached(engine_path, meta_path, layers_path, trt_version=trt.__version__, gpu=gpu)
        if meta is not None:
            log.info("engine cache hit: %s", engine_path)
            return EngineArtifact(engine_path, meta_path, layers_path, meta, True, command)

    log.info("building TensorRT %s engine for %s (%s, sm %s): %s", trt.__version__,
             onnx_path.name, gpu.name, gpu.compute_capability, command)
    logger = _trt_logger(trt)
    _init_plugins(trt)
    logger.take_errors()
    builder = trt.Builder(logger)
    network = builder.create_network(_network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [_parser_error_text(parser.get_error(i)) for i in range(parser.num_errors)]
        errors = errors or logger.take_errors()
        raise BackendError(
            f"TensorRT could not parse the ONNX model ({len(errors)} error(s)): "
            + _errors_text(errors, "no parser error reported"),
            where=str(onnx_path),
            fix="fix or replace the named node(s): check the model with `python -m quantkit.lint` "
                "and TensorRT's ONNX operator support list")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mb << 20)
    config.builder_optimization_level = settings.builder_optimization_level
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if profiles:
        profile = builder.create_optimization_profile()
        for name, (lo, mid, hi) in profiles.items():
            try:
                profile.set_shape(name, lo, mid, hi)
            except RuntimeError as exc:  # the binding raises on inconsistent min/opt/max
                raise ProfileError(f"TensorRT rejected the profile of input {name!r}: {exc}",
                                   where=f"input {name}", value=(lo, mid, hi),
                                   fix="check backend batch/sequence ranges and shape_overrides "
                                       "against the model input") from exc
        if config.add_optimization_profile(profile) < 0:
            raise BackendError("TensorRT rejected the optimization profile: "
                               + _errors_text(logger.take_errors(), str(profiles)),
                               where=str(onnx_path),
                               fix="check backend batch/sequence ranges against the model inputs")
    _timing_cache(config, settings.timing_cache)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BackendError("TensorRT could not build the engine: "
                           + _errors_text(logger.take_errors(), "no error reported"),
                           where=str(onnx_path),
                           fix="read the TensorRT errors above; a larger backend.workspace_mb or a "
                               "narrower shape profile helps with out-of-memory tactics")
    engine_bytes = bytes(serialized)
    if settings.timing_cache:
        updated = config.get_timing_cache()
        if updated is not None:
            _write_atomic(Path(settings.timing_cache), bytes(updated.serialize()))

    meta_path.unlink(missing_ok=True)  # an entry without metadata is never taken as a cache hit
    _write_atomic(engine_path, engine_bytes)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise BackendError("TensorRT could not load the engine it just built: "
                           + _errors_text(logger.take_errors(), "no error reported"),
                           where=str(engine_path), fix="rerun with backend.rebuild=true")
    layer_report(engine, path=layers_path)
    del engine, runtime

    meta = EngineMeta(tensorrt_version=trt.__version__, gpu_name=gpu.name,
                      compute_capability=gpu.compute_capability, onnx_sha256=onnx_digest,
                      settings_sha256=settings_sha256(key_settings), created=utc_now(),
                      engine_sha256=_sha256_bytes(engine_bytes), cache_key=key,
                      settings=key_settings)
    meta.save(meta_path)  # written last: its presence marks a complete cache entry
    log.info("engine written: %s (%d bytes)", engine_path, len(engine_bytes))
    return EngineArtifact(engine_path, meta_path, layers_path, meta, False, command)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------

class TrtRunner:
    """``with TrtRunner("model.engine") as r: outputs = r.infer(feed)``.

    On entry the engine's ``.meta.json`` (when present) is checked against this machine's GPU
    and TensorRT version; a mismatch raises ``BackendError`` with the rebuild fix. ``infer``
    takes host arrays of the engine's exact input dtypes and returns fresh host arrays.
    """

    def __init__(self, engine_path: str | os.PathLike, *, name: str = "trt",
                 check_meta: bool = True, device: int = 0) -> None:
        self.engine_path = Path(engine_path)
        self.name = name
        self.check_meta = check_meta
        self.device = device
        self.engine_ = None
        self.context_ = None
        self.stream_ = None
        self._trt = None
        self._pcuda = None
        self._runtime = None
        self._logger = None
        self._buffers: dict = {}
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._dtypes: dict[str, np.dtype] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "TrtRunner":
        trt = require_tensorrt()
        pcuda = require_cuda_runtime()
        if not self.engine_path.is_file():
            raise BackendError("engine file not found", where=str(self.engine_path),
                               fix="build it with quantkit.backends.trt.build_engine (backend=trt)")
        meta_path = meta_path_for(self.engine_path)
        if self.check_meta:
            if meta_path.is_file():
                gpu = cuda_device_info(self.device)
                check_compatible(load_meta(meta_path), tensorrt_version=trt.__version__,
                                 gpu_name=gpu.name, compute_capability=gpu.compute_capability,
                                 engine_path=self.engine_path)
            else:
                log.warning("%s has no %s; cannot check it was built for this GPU/TensorRT",
                            self.engine_path, meta_path.name)
        _use_device(self.device)
        self._trt = trt
        self._logger = _trt_logger(trt)
        _init_plugins(trt)
        self._logger.take_errors()
        self._runtime = trt.Runtime(self._logger)
        engine = self._runtime.deserialize_cuda_engine(self.engine_path.read_bytes())
        if engine is None:
            raise BackendError("TensorRT could not deserialize the engine: "
                               + _errors_text(self._logger.take_errors(), "no error reported"),
                               where=str(self.engine_path),
                               fix="engines are specific to GPU and TensorRT version: rebuild it "
                                   f"(delete {self.engine_path} or run with backend.rebuild=true)")
        context = engine.create_execution_context()
        if context is None:
            raise BackendError("TensorRT could not create an execution context: "
                               + _errors_text(self._logger.take_errors(), "no error reported"),
                               where=str(self.engine_path),
                               fix="free GPU memory (other processes) and retry")
        self.engine_, self.context_ = engine, context
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self._inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        for n in self._inputs + self._outputs:
            if engine.is_shape_inference_io(n):
                raise BackendError("engine has a shape-tensor I/O, which TrtRunner does not feed",
                                   where=self.name, value=n,
                                   fix="export the model without shape-tensor inputs/outputs")
            dtype = engine.get_tensor_dtype(n)
            try:
                self._dtypes[n] = np.dtype(trt.nptype(dtype))
            except TypeError as exc:
                raise BackendError(f"engine I/O tensor {n!r} has type {dtype}, which has no NumPy "
                                   "equivalent", where=self.name, value=str(dtype),
                                   fix="keep graph inputs/outputs FP32, FP16 or integer") from exc
        self.stream_ = pcuda.Stream()
        self._pcuda = pcuda
        return self

    def __exit__(self, *exc: object) -> None:
        for buf in self._buffers.values():
            buf.free()
        self._buffers.clear()
        if self.stream_ is not None:
            self.stream_.free()
            self.stream_ = None
        self.context_ = None  # context before engine before runtime
        self.engine_ = None
        self._runtime = None

    @property
    def input_names(self) -> list[str]:
        self._active()
        return list(self._inputs)

    @property
    def output_names(self) -> list[str]:
        self._active()
        return list(self._outputs)

    def _active(self):
        if self.context_ is None:
            raise BackendError("runner used outside its `with` block", where=self.name,
                               fix="use `with TrtRunner(engine_path) as r: r.infer(feed)`")
        return self.engine_, self.context_

    def _device_buffer(self, name: str, n_elements: int):
        buf = self._buffers.get(name)
        shape = (max(n_elements, 1),)  # never a null address, even for an empty tensor
        if buf is None:
            buf = self._pcuda.DeviceArray(shape=shape, dtype=self._dtypes[name])
            self._buffers[name] = buf
        else:
            buf.resize(shape)
        return buf

    def _profile_range(self, name: str) -> str:
        try:
            lo, _, hi = self.engine_.get_tensor_profile_shape(name, 0)
            return f"{tuple(lo)}..{tuple(hi)}"
        except Exception:  # informational only
            return "unknown"

    # -- inference -------------------------------------------------------------------------
    def infer(self, feed: Mapping[str, np.ndarray],
              output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        engine, context = self._active()
        missing = [n for n in self._inputs if n not in feed]
        if missing:
            raise BackendError("feed lacks an engine input", where=self.name, value=missing[0],
                               fix=f"feed all of {self._inputs}")
        extra = [n for n in feed if n not in self._inputs]
        if extra:
            raise BackendError("feed has a tensor that is not an engine input", where=self.name,
                               value=extra[0], fix=f"the engine inputs are {self._inputs}")
        wanted = list(output_names) if output_names else list(self._outputs)
        unknown = [n for n in wanted if n not in self._outputs]
        if unknown:
            raise BackendError("requested output is not an engine output", where=self.name,
                               value=unknown[0],
                               fix=f"choose from {self._outputs} (intermediate tensors need a "
                                   "separate debug engine with those outputs marked)")

        keep_alive = []
        for name in self._inputs:
            arr = np.asarray(feed[name])
            expected = self._dtypes[name]
            if arr.dtype != expected:
                raise BackendError(f"input {name!r} has dtype {arr.dtype}; the engine expects "
                                   f"{expected}", where=self.name, value=str(arr.dtype),
                                   fix=f"cast the feed to {expected} (ONNX Runtime refuses it too)")
            arr = np.ascontiguousarray(arr)
            if not context.set_input_shape(name, arr.shape):
                raise BackendError(f"input {name!r} shape {arr.shape} is outside the engine's "
                                   f"optimization profile {self._profile_range(name)}",
                                   where=self.name, value=arr.shape,
                                   fix="feed smaller batches/sequences or rebuild with a wider "
                                       "profile (backend.max_batch, backend.max_sequence)")
            buf = self._device_buffer(name, arr.size)
            buf.copy_from(arr, stream=self.stream_)
            keep_alive.append(arr)
            context.set_tensor_address(name, buf.ptr)

        shapes: dict[str, Shape] = {}
        for name in self._outputs:  # every output needs an address, wanted or not
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BackendError(f"output {name!r} has a data-dependent shape {shape}",
                                   where=self.name, value=shape,
                                   fix="TrtRunner needs output shapes known from the input shapes")
            shapes[name] = shape
            buf = self._device_buffer(name, int(np.prod(shape, dtype=np.int64)))
            context.set_tensor_address(name, buf.ptr)

        if not context.execute_async_v3(self.stream_.ptr):
            raise BackendError("TensorRT execute_async_v3 failed: "
                               + _errors_text(self._logger.take_errors(), "no error reported"),
                               where=self.name, fix="read the TensorRT errors above")
        results: dict[str, np.ndarray] = {}
        for name in wanted:
            host = np.empty(shapes[name], dtype=self._dtypes[name])
            if host.size:
                self._buffers[name].copy_to(host, stream=self.stream_)
            results[name] = host
        self.stream_.synchronize()
        del keep_alive
        return results


# --------------------------------------------------------------------------------------------
# Layer report: which layers run INT8
# --------------------------------------------------------------------------------------------

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
        for key in ("Inputs", "Outputs"):
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
        logger = _trt_logger(trt)
        _init_plugins(trt)
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(Path(engine).read_bytes())
        if engine is None:
            raise BackendError("TensorRT could not deserialize the engine: "
                               + _errors_text(logger.take_errors(), "no error reported"),
                               fix="rebuild it (backend.rebuild=true)")
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    layers = parse_layer_info(text)
    if path is not None:
        _write_atomic(Path(path), text)
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
    by_meta = [l for l in layers if node in onnx_nodes_of(l)]
    if by_meta:
        return by_meta, "metadata"
    by_token = [l for l in layers if not _is_reformat(l) and node in _name_tokens(l["Name"])]
    if by_token:
        return by_token, "name"
    pattern = _name_pattern(node)
    by_substring = [l for l in layers if not _is_reformat(l) and pattern.search(l["Name"])]
    if by_substring:
        return by_substring, "name-substring"
    return [], None


def check_int8_layers(layer_report: Sequence[Mapping] | Mapping | str,
                      planned_int8_nodes: Sequence[str]) -> dict:
    """For each ONNX node planned INT8: did TensorRT run a layer containing it with INT8 I/O?

    Layers are found by the ``[ONNX Layer: name]`` entries in ``Metadata``, else by the layer
    name (TensorRT names fused layers ``a + b``). Per node the status is ``int8`` (a matching
    layer has an Int8 input or output format), ``not_int8``, ``opaque`` (only Myelin regions
    matched and their boundary tensors are not Int8: the inspector cannot tell) or
    ``not_found``. ``ok`` is True when every planned node is ``int8``.
    """
    layers = (parse_layer_info(layer_report)
              if isinstance(layer_report, (str, bytes, Mapping)) else parse_layer_info(list(layer_report)))
    nodes: dict[str, dict] = {}
    for node in planned_int8_nodes:
        matched, how = _layers_for(node, layers)
        int8_tensors: list[str] = []
        formats: list[str] = []
        for layer in matched:
            for key in ("Inputs", "Outputs"):
                for tensor in layer[key]:
                    fmt = _tensor_format(tensor)
                    formats.append(f"{layer['Name']} {key[:-1].lower()} "
                                   f"{tensor.get('Name', '?')}: {fmt or 'unknown'}")
                    if _INT8.search(fmt):
                        int8_tensors.append(f"{layer['Name']}:{tensor.get('Name', '?')}")
        if not matched:
            status = "not_found"
        elif int8_tensors:
            status = "int8"
        elif all(_is_opaque(l) for l in matched):
            status = "opaque"
        else:
            status = "not_int8"
        nodes[node] = {"status": status, "matched_by": how,
                       "layers": [l["Name"] for l in matched],
                       "layer_types": [str(l.get("LayerType", "")) for l in matched],
                       "tactics": [str(l.get("TacticName", "")) for l in matched
                                   if l.get("TacticName")],
                       "int8_tensors": int8_tensors, "formats": formats}
    counts = {s: sum(1 for v in nodes.values() if v["status"] == s)
              for s in ("int8", "not_int8", "opaque", "not_found")}
    result = {"ok": bool(nodes) and counts["int8"] == len(nodes),
              "n_planned": len(nodes), "n_int8": counts["int8"], "n_not_int8": counts["not_int8"],
              "n_opaque": counts["opaque"], "n_not_found": counts["not_found"], "nodes": nodes}
    log.info("INT8 layer check: %d/%d planned nodes run INT8 (%d not, %d opaque, %d not found)",
             counts["int8"], len(nodes), counts["not_int8"], counts["opaque"], counts["not_found"])
    return result
