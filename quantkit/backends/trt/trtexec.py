"""The ``trtexec`` command line that builds the same engine as ``build_engine`` (pure Python)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from quantkit.backends.trt.onnxfile import load_onnx
from quantkit.backends.trt.profiles import Profile, ShapeNeeds, profile_set, profiles_from_model
from quantkit.settings import TrtConfig


def _trtexec_name(name: str) -> str:
    # trtexec splits shape specs on ',' and ':'; such names go in single quotes.
    return f"'{name}'" if any(c in name for c in ",: ") else name


def _shape_spec(profiles: Mapping[str, Profile], which: int) -> str:
    return ",".join(f"{_trtexec_name(name)}:{'x'.join(str(d) for d in shapes[which])}"
                    for name, shapes in profiles.items())


def engine_profiles(profiles: Mapping[str, Profile], settings: TrtConfig,
                    needs: ShapeNeeds | None) -> list[dict[str, Profile]]:
    """Profile 0, plus one per latency batch size with ``backend.trt.latency_profiles``."""
    sizes = needs.latency_batch_sizes if (settings.latency_profiles and needs) else ()
    return profile_set(profiles, sizes)


def trtexec_command(onnx_path: str | os.PathLike, settings: TrtConfig, *,
                    engine_path: str | os.PathLike | None = None,
                    layer_info_path: str | os.PathLike | None = None,
                    model: onnx.ModelProto | None = None,
                    needs: ShapeNeeds | None = None,
                    timing_cache_path: str | os.PathLike | None = None,
                    debug_tensors: Sequence[str] = ()) -> str:
    """The ``trtexec`` command line that builds the same engine as ``build_engine``.

    ``--stronglyTyped`` is required on TensorRT 10 and accepted (ignored) on 11; no precision
    flag is ever passed; ``--noTF32`` unless ``backend.trt.tf32``. The engine goes to
    ``engine_path`` (default: the ONNX path with ``.engine``).
    """
    onnx_path = Path(onnx_path)
    if model is None:
        model = load_onnx(onnx_path)
    profiles = profiles_from_model(model, settings, needs=needs)
    engine_path = Path(engine_path) if engine_path is not None else onnx_path.with_suffix(".engine")
    args = ["trtexec", f"--onnx={onnx_path}", "--stronglyTyped"]
    if not settings.tf32:
        args.append("--noTF32")
    for each in engine_profiles(profiles, settings, needs) if profiles else []:
        # trtexec makes one optimization profile per repeated min/opt/max group
        args += [f"--minShapes={_shape_spec(each, 0)}", f"--optShapes={_shape_spec(each, 1)}",
                 f"--maxShapes={_shape_spec(each, 2)}"]
    args += [f"--memPoolSize=workspace:{settings.workspace_mb}M",
             f"--builderOptimizationLevel={settings.builder_optimization_level}",
             "--profilingVerbosity=detailed"]
    cache = timing_cache_path if timing_cache_path is not None else settings.timing_cache
    if cache:
        args.append(f"--timingCacheFile={cache}")
    if debug_tensors:
        args.append("--markDebug=" + ",".join(_trtexec_name(n) for n in sorted(set(debug_tensors))))
    args.append(f"--saveEngine={engine_path}")
    if layer_info_path is not None:
        args.append(f"--exportLayerInfo={layer_info_path}")
    args.append("--skipInference")
    return " ".join(shlex.quote(str(a)) for a in args)
