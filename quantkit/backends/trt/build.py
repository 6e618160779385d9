"""Build a strongly typed engine from a Q/DQ ONNX file, or reuse the cached one.

The cache entry ``cache_dir/<key>/`` is keyed by sha256 of the ONNX bytes, the build settings
(with resolved profiles), the TensorRT version, the GPU name and its compute capability; it
holds ``model.engine``, ``model.meta.json`` (``EngineMeta``) and ``model.layers.json`` (the
engine inspector's JSON).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from quantkit.backends.engine_meta import (EngineMeta, check_compatible, engine_cache_key,
                                           load_meta, meta_path_for, settings_sha256, utc_now)
from quantkit.backends.trt.availability import (GpuInfo, cuda_device_info, require_tensorrt,
                                                tensorrt_major, use_device)
from quantkit.backends.trt.layers import layer_report
from quantkit.backends.trt.onnxfile import load_onnx, onnx_sha256, sha256_bytes
from quantkit.backends.trt.profiles import (Profile, ProfileError, ShapeNeeds,
                                            check_profiles_cover, profiles_from_model)
from quantkit.backends.trt.session import (errors_text, init_plugins, network_flags,
                                           parser_error_text, trt_logger)
from quantkit.backends.trt.timing_cache import (load_timing_cache, save_timing_cache,
                                                timing_cache_path)
from quantkit.backends.trt.trtexec import engine_profiles, trtexec_command
from quantkit.errors import BackendError, BackendUnavailable
from quantkit.fsutil import atomic_write_bytes
from quantkit.settings import TrtConfig

log = logging.getLogger(__name__)

#: Bumped when build_engine's recipe changes in a way that changes engines (invalidates caches).
#: 2: TF32 cleared unless backend.trt.tf32.
BUILD_RECIPE = 2


def engine_key_dict(settings: TrtConfig, profiles: Mapping[str, Profile],
                    debug_tensors: Sequence[str] = (),
                    extra_profiles: Sequence[Mapping[str, Profile]] = ()) -> dict:
    """What the engine depends on: the resolved profiles (not the knobs that produced them),
    TF32, workspace, optimization level, the tensors marked for debugging; the timing-cache
    path, device index, rebuild flag and CUDA graphs only change how it is built or run, and
    are left out."""
    key = {
        "recipe": BUILD_RECIPE,
        "strongly_typed": True,
        "profiling_verbosity": "detailed",
        "tf32": bool(settings.tf32),
        "workspace_mb": settings.workspace_mb,
        "builder_optimization_level": settings.builder_optimization_level,
        "tensorrt_major": settings.tensorrt_major,
        "profiles": {name: [list(s) for s in shapes] for name, shapes in profiles.items()},
    }
    if extra_profiles:  # backend.trt.latency_profiles: one per timed batch size
        key["extra_profiles"] = [{n: [list(x) for x in p] for n, p in each.items()}
                                 for each in extra_profiles]
    if debug_tensors:  # a separate debug engine; the signed-off engine has none
        key["debug_tensors"] = sorted(set(debug_tensors))
    return key


@dataclass(frozen=True)
class EngineArtifact:
    """A built (or reused) engine and the files beside it."""

    engine_path: Path
    meta_path: Path
    layers_path: Path
    meta: EngineMeta
    cache_hit: bool
    trtexec: str  # the equivalent command line, for the report


def check_major(trt, settings: TrtConfig) -> None:
    have = tensorrt_major(trt.__version__)
    if settings.tensorrt_major is not None and settings.tensorrt_major != have:
        raise BackendUnavailable(f"this run targets TensorRT {settings.tensorrt_major}.x but "
                                 f"tensorrt {trt.__version__} is installed",
                                 where="backend.trt.tensorrt_major", value=settings.tensorrt_major,
                                 fix=f"pip install 'tensorrt-cu12=={settings.tensorrt_major}.*' or "
                                     f"set backend.trt.tensorrt_major={have} (or null)")


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
    if meta.engine_sha256 != sha256_bytes(engine_path.read_bytes()):
        log.warning("cached engine %s does not match its metadata hash; rebuilding", engine_path)
        return None
    return meta


def _set_profiles(trt, builder, config, logger, profiles: Mapping[str, Profile],
                  onnx_path: Path) -> None:
    profile = builder.create_optimization_profile()
    for name, (lo, mid, hi) in profiles.items():
        try:
            profile.set_shape(name, lo, mid, hi)
        except RuntimeError as exc:  # the binding raises on inconsistent min/opt/max
            raise ProfileError(f"TensorRT rejected the profile of input {name!r}: {exc}",
                               where=f"input {name}", value=(lo, mid, hi),
                               fix="check backend.trt batch/sequence ranges and shape_overrides "
                                   "against the model input") from exc
    if config.add_optimization_profile(profile) < 0:
        raise BackendError("TensorRT rejected the optimization profile: "
                           + errors_text(logger.take_errors(), str(profiles)),
                           where=str(onnx_path),
                           fix="check backend.trt batch/sequence ranges against the model inputs")


def _mark_debug(network, names: Sequence[str], onnx_path: Path) -> None:
    """Mark the named network tensors as debug tensors (their values reach an IDebugListener)."""
    tensors = {}
    for i in range(network.num_inputs):
        tensors[network.get_input(i).name] = network.get_input(i)
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            tensors[t.name] = t
    missing = [n for n in names if n not in tensors]
    if len(missing) == len(names):
        raise BackendError("none of the tensors to debug is in the TensorRT network",
                           where=str(onnx_path), value=list(names)[:3],
                           fix="pass ONNX tensor names of the artifact (the per-layer report's)")
    for n in missing:
        log.warning("debug tensor %s is not in the TensorRT network of %s (folded away?)", n,
                    onnx_path.name)
    for n in names:
        if n in tensors and not network.mark_debug(tensors[n]):
            log.warning("TensorRT refused to mark %s as a debug tensor", n)


def build_engine(onnx_path: str | os.PathLike, settings: TrtConfig, *,
                 cache_dir: str | os.PathLike, rebuild: bool | None = None,
                 device: int | None = None, needs: ShapeNeeds | None = None,
                 debug_tensors: Sequence[str] = ()) -> EngineArtifact:
    """Build a strongly typed engine from a Q/DQ ONNX file, or reuse the cached one.

    ``rebuild`` / ``device`` default to ``settings.rebuild`` / ``settings.device``; ``needs``
    (the run's shapes) picks image ranges and is checked against the profile before building.
    The timing cache lives at ``settings.timing_cache`` (a directory or ``*.cache`` stem;
    default ``cache_dir/timing``) under a name keyed by TensorRT version and GPU.
    ``debug_tensors``: ONNX tensor names marked as TensorRT debug tensors (``mark_debug``, like
    trtexec ``--markDebug``) for a per-layer debug run; a separate cache entry.
    """
    rebuild = settings.rebuild if rebuild is None else rebuild
    device = settings.device if device is None else device
    onnx_path = Path(onnx_path)
    model = load_onnx(onnx_path)
    profiles = profiles_from_model(model, settings, needs=needs)
    if needs is not None:
        check_profiles_cover(profiles, needs, model)
    trt = require_tensorrt()
    check_major(trt, settings)
    gpu = cuda_device_info(device)
    use_device(device)
    onnx_digest = onnx_sha256(onnx_path, model)
    all_profiles = engine_profiles(profiles, settings, needs) if profiles else []
    key_settings = engine_key_dict(settings, profiles, debug_tensors, all_profiles[1:])
    key = engine_cache_key(onnx_digest, key_settings, trt.__version__, gpu.name,
                           gpu.compute_capability)
    out_dir = Path(cache_dir) / key[:24]
    engine_path = out_dir / "model.engine"
    meta_path = meta_path_for(engine_path)
    layers_path = out_dir / "model.layers.json"
    tc_path = timing_cache_path(settings.timing_cache or Path(cache_dir) / "timing",
                                trt.__version__, gpu)
    command = trtexec_command(onnx_path, settings, engine_path=engine_path,
                              layer_info_path=layers_path, model=model, needs=needs,
                              timing_cache_path=tc_path, debug_tensors=debug_tensors)

    if not rebuild:
        meta = _cached(engine_path, meta_path, layers_path, trt_version=trt.__version__, gpu=gpu)
        if meta is not None:
            log.info("engine cache hit: %s", engine_path)
            return EngineArtifact(engine_path, meta_path, layers_path, meta, True, command)

    log.info("building TensorRT %s engine for %s (%s, sm %s): %s", trt.__version__,
             onnx_path.name, gpu.name, gpu.compute_capability, command)
    logger = trt_logger(trt)
    init_plugins(trt)
    logger.take_errors()
    builder = trt.Builder(logger)
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [parser_error_text(parser.get_error(i)) for i in range(parser.num_errors)]
        errors = errors or logger.take_errors()
        raise BackendError(
            f"TensorRT could not parse the ONNX model ({len(errors)} error(s)): "
            + errors_text(errors, "no parser error reported"),
            where=str(onnx_path),
            fix="fix or replace the named node(s): check the model with `python -m quantkit.cli.lint_cmd` "
                "and TensorRT's ONNX operator support list")

    if debug_tensors:
        _mark_debug(network, debug_tensors, onnx_path)
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, settings.workspace_mb << 20)
    config.builder_optimization_level = settings.builder_optimization_level
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    if not settings.tf32:  # TensorRT enables TF32 by default: FP32 layers would run TF32
        config.clear_flag(trt.BuilderFlag.TF32)
    for each in all_profiles:
        _set_profiles(trt, builder, config, logger, each, onnx_path)
    load_timing_cache(config, tc_path)

    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise BackendError("TensorRT could not build the engine: "
                           + errors_text(logger.take_errors(), "no error reported"),
                           where=str(onnx_path),
                           fix="read the TensorRT errors above; a larger backend.trt.workspace_mb "
                               "or a narrower shape profile helps with out-of-memory tactics")
    engine_bytes = bytes(serialized)
    save_timing_cache(config, tc_path)

    meta_path.unlink(missing_ok=True)  # an entry without metadata is never taken as a cache hit
    atomic_write_bytes(engine_path, engine_bytes)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise BackendError("TensorRT could not load the engine it just built: "
                           + errors_text(logger.take_errors(), "no error reported"),
                           where=str(engine_path), fix="rerun with backend.trt.rebuild=true")
    layer_report(engine, path=layers_path)
    del engine, runtime

    meta = EngineMeta(tensorrt_version=trt.__version__, gpu_name=gpu.name,
                      compute_capability=gpu.compute_capability, onnx_sha256=onnx_digest,
                      settings_sha256=settings_sha256(key_settings), created=utc_now(),
                      engine_sha256=sha256_bytes(engine_bytes), cache_key=key,
                      settings=key_settings)
    meta.save(meta_path)  # written last: its presence marks a complete cache entry
    log.info("engine written: %s (%d bytes)", engine_path, len(engine_bytes))
    return EngineArtifact(engine_path, meta_path, layers_path, meta, False, command)
