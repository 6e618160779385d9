"""Facts about the machine and runtime that produced a number.

Every stage-cache key of a measured or float-computed value (evaluation, backend check,
latency, per-layer run, calibration statistics, the ptq passes, the FP16 range check)
includes :func:`execution_environment`, so a result is never reused on another CPU ISA,
BLAS kernel, ONNX Runtime version, GPU or TensorRT version. ``record.host`` shows
:func:`host_facts`.

Bottom layer: imports only the standard library (and numpy, threadpoolctl, onnxruntime and
the TensorRT backend lazily, inside functions).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["cpu_name", "cpu_isa", "numpy_blas", "host_facts", "gpu_facts",
           "execution_environment", "ISA_FLAGS"]

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


def numpy_blas() -> str:
    """numpy's BLAS library, its version and the kernel it dispatched to on this CPU, e.g.
    ``"openblas 0.3.31.188.0 SkylakeX"`` (threadpoolctl, a scikit-learn dependency).

    numpy's matrix products (GPTQ's Hessians and solves, the channel statistics) round
    differently per kernel: the same AVX-512 host with ``OPENBLAS_CORETYPE=Haswell`` in the
    environment built other INT8 weights for bert_int8 than without it (measured:
    benchmarks/results/bert_int8.md; the rule: docs/reliability.md). Only the BLAS numpy
    itself loads is named (its ``numpy.libs`` copy when there is one), so the answer does not
    change when scipy loads its own later.
    """
    import importlib

    importlib.import_module("numpy")  # loads numpy's BLAS, so threadpoolctl can see it

    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    own = [i for i in blas if Path(str(i.get("filepath", ""))).parent.name == "numpy.libs"]
    pick = own[0] if own else (blas[0] if len(blas) == 1 else None)
    if pick is None:
        return "unknown"
    return " ".join(str(pick[k]) for k in ("internal_api", "version", "architecture")
                    if pick.get(k))


def host_facts(backend: Any = None) -> dict[str, Any]:
    """What ``record.host`` says about the machine. On ``backend.name == "trt"`` (a
    BackendConfig), ``gpu`` is :func:`quantkit.backends.trt.gpu_environment` of
    ``backend.trt.device`` (GPU, compute capability, driver, CUDA and TensorRT versions)."""
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpu": cpu_name(), "cpu_isa": cpu_isa(),
            "blas": numpy_blas(), "cpu_count": os.cpu_count(), "gpu": gpu_facts(backend)}


def gpu_facts(backend: Any) -> dict[str, Any] | None:
    """The GPU facts of a ``backend=trt`` run (None on other backends); BackendUnavailable
    with the fix where tensorrt or the GPU is missing."""
    if getattr(backend, "name", None) != "trt":
        return None
    from quantkit.backends.trt import gpu_environment

    return gpu_environment(getattr(getattr(backend, "trt", None), "device", 0))


def execution_environment(backend: Any) -> dict[str, Any]:
    """What a cached measurement on ``backend`` (a BackendConfig) depends on beyond its inputs.

    CPU model and ISA, numpy's BLAS kernel (:func:`numpy_blas`), the ONNX Runtime version
    and, for ``backend.name == "trt"``, what
    :func:`quantkit.backends.trt.gpu_environment` reports (TensorRT version, GPU name,
    compute capability, driver and CUDA versions). Hostnames are left out on purpose: two
    machines of the same kind share results.
    """
    import onnxruntime

    env: dict[str, Any] = {"cpu": cpu_name(), "cpu_isa": cpu_isa(), "blas": numpy_blas(),
                           "onnxruntime": onnxruntime.__version__}
    if getattr(backend, "name", None) == "trt":
        env["gpu"] = gpu_facts(backend)
    return env
