"""Facts about the machine and runtime that produced a number.

Every stage-cache key of a measured value (evaluation, backend check, latency, per-layer
run) includes :func:`execution_environment`, so a result is never reused on another CPU ISA,
ONNX Runtime version, GPU or TensorRT version. ``record.host`` shows :func:`host_facts`.

Bottom layer: imports only the standard library (and onnxruntime / the TensorRT backend
lazily, inside functions).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["cpu_name", "cpu_isa", "host_facts", "gpu_facts", "execution_environment", "ISA_FLAGS"]

# The /proc/cpuinfo flags that change ONNX Runtime's x86 integer kernels (u8s8 VPMADDUBSW on
# AVX2 can saturate; VNNI / AMX compute int8 dot products exactly).
ISA_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile", "amx_int8",
             "avx512_bf16", "amx_bf16")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_isa() -> list[str]:
    """The ISA extensions of :data:`ISA_FLAGS` this CPU has, in that order (x86 Linux)."""
    for line in _cpuinfo().splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in ISA_FLAGS if f in have]
    return []


def host_facts(backend: Any = None) -> dict[str, Any]:
    """What ``record.host`` says about the machine. On ``backend.name == "trt"`` (a
    BackendConfig), ``gpu`` is :func:`quantkit.backends.trt.gpu_environment` of
    ``backend.trt.device`` (GPU, compute capability, driver, CUDA and TensorRT versions)."""
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpu": cpu_name(), "cpu_isa": cpu_isa(),
            "cpu_count": os.cpu_count(), "gpu": gpu_facts(backend)}


def gpu_facts(backend: Any) -> dict[str, Any] | None:
    """The GPU facts of a ``backend=trt`` run (None on other backends); BackendUnavailable
    with the fix where tensorrt or the GPU is missing."""
    if getattr(backend, "name", None) != "trt":
        return None
    from quantkit.backends.trt import gpu_environment

    return gpu_environment(getattr(getattr(backend, "trt", None), "device", 0))


def execution_environment(backend: Any) -> dict[str, Any]:
    """What a cached measurement on ``backend`` (a BackendConfig) depends on beyond its inputs.

    CPU model and ISA, the ONNX Runtime version and, for ``backend.name == "trt"``, what
    :func:`quantkit.backends.trt.gpu_environment` reports (TensorRT version, GPU name,
    compute capability, driver and CUDA versions). Hostnames are left out on purpose: two
    machines of the same kind share results.
    """
    import onnxruntime

    env: dict[str, Any] = {"cpu": cpu_name(), "cpu_isa": cpu_isa(),
                           "onnxruntime": onnxruntime.__version__}
    if getattr(backend, "name", None) == "trt":
        env["gpu"] = gpu_facts(backend)
    return env
