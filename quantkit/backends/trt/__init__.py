"""TensorRT backend: build strongly typed engines from Q/DQ ONNX, run them, inspect their layers.

``tensorrt`` is imported lazily, inside the functions that need it (``require_tensorrt``):
``import quantkit.backends.trt`` works on any machine, and everything that does not touch a
GPU (optimization profiles, the trtexec command, the layer-report parser, timing-cache keys,
engine metadata) is plain Python tested on CPU.

TensorRT versions. quantkit needs TensorRT >= 10 (the I/O tensor API and strongly typed
networks). Precision lives in the ONNX graph (Q/DQ + FP16 casts), so no precision builder flag
is ever set:

- 10.x: the network is created with ``1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)``;
- 11.x: every network is strongly typed; the flag is deprecated and ignored, so none is passed.

TF32 (on by default in TensorRT) is cleared unless ``backend.trt.tf32=true``.

Modules, one job each: ``availability`` (tensorrt, libcudart, the GPU), ``profiles`` (shapes
the engine accepts vs shapes the run feeds), ``trtexec`` (the equivalent command),
``build`` + ``timing_cache`` (build and engine cache), ``runner`` + ``cuda`` (run, time),
``layers`` (inspector JSON, INT8 check), ``run`` (what a run calls). The settings schema is
:class:`quantkit.settings.TrtConfig` (``backend.trt.*``), exported here as ``EngineSettings``.
"""

from quantkit.backends.trt.availability import (INSTALL_FIX, MIN_POLYGRAPHY, MIN_TENSORRT_MAJOR,
                                                GpuInfo, check_polygraphy_version,
                                                cuda_device_info, cuda_runtime_package,
                                                cudart_fix, format_cuda_version, gpu_environment,
                                                require_cuda_runtime, require_tensorrt,
                                                tensorrt_cuda_major, tensorrt_major)
from quantkit.backends.trt.build import (BUILD_RECIPE, EngineArtifact, build_engine,
                                         engine_key_dict)
from quantkit.backends.trt.layers import (INT8_STATUSES, check_int8_layers, layer_report,
                                          onnx_nodes_of, parse_layer_info)
from quantkit.backends.trt.onnxfile import onnx_sha256
from quantkit.backends.trt.profiles import (Profile, ProfileError, Shape, ShapeNeeds,
                                            check_profiles_cover, profiles_from_model,
                                            shape_needs)
from quantkit.backends.trt.infer import (EngineBuild, build_for_run, engine_numerics_note,
                                       preflight, runner_for)
from quantkit.backends.trt.runner import TrtRunner
from quantkit.backends.trt.timing_cache import merge_into_file, timing_cache_path
from quantkit.backends.trt.trtexec import trtexec_command
from quantkit.settings import TrtConfig as EngineSettings

__all__ = [
    "BUILD_RECIPE", "EngineArtifact", "EngineBuild", "EngineSettings", "GpuInfo", "INSTALL_FIX",
    "INT8_STATUSES", "MIN_POLYGRAPHY", "MIN_TENSORRT_MAJOR", "Profile", "ProfileError", "Shape",
    "ShapeNeeds", "TrtRunner", "build_engine", "build_for_run", "check_int8_layers",
    "check_polygraphy_version", "check_profiles_cover", "cuda_device_info",
    "cuda_runtime_package", "cudart_fix", "engine_key_dict", "engine_numerics_note",
    "format_cuda_version", "gpu_environment", "layer_report", "merge_into_file",
    "onnx_nodes_of", "onnx_sha256", "parse_layer_info", "preflight", "profiles_from_model",
    "require_cuda_runtime", "require_tensorrt", "runner_for", "shape_needs",
    "tensorrt_cuda_major", "tensorrt_major", "timing_cache_path", "trtexec_command",
]
