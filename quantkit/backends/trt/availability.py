"""Availability of TensorRT and the CUDA runtime; the GPU a run builds, runs and times on.

Everything here loads lazily: ``tensorrt`` inside :func:`require_tensorrt`, libcudart (through
polygraphy's loader) inside :func:`cuda_device_info`, NVML inside :func:`driver_version`.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from importlib import metadata

from quantkit.errors import BackendUnavailable, first_line
from quantkit.settings import TRT_MIN_MAJOR

log = logging.getLogger(__name__)

#: Oldest TensorRT major version quantkit builds with (I/O tensor API, strongly typed networks).
MIN_TENSORRT_MAJOR = TRT_MIN_MAJOR

#: Oldest polygraphy whose CUDA loader finds a pip-installed libcudart (nvidia/cuda_runtime/lib).
MIN_POLYGRAPHY = (0, 53)

INSTALL_FIX = ("Install tensorrt on a machine with an NVIDIA GPU (pip install -e '.[tensorrt]'), "
               "or use backend=ort")


def tensorrt_major(version: str) -> int:
    """``"10.8.0.43"`` -> 10."""
    head = str(version).split(".", 1)[0]
    if not head.isdigit():
        raise BackendUnavailable("unrecognised tensorrt version string", value=version,
                                 fix=INSTALL_FIX)
    return int(head)


def require_tensorrt():
    """The ``tensorrt`` module (>= 10), or ``BackendUnavailable`` saying how to get it."""
    reinstall = ("reinstall it with its libraries (pip install -e '.[tensorrt]') on a machine "
                 "with an NVIDIA GPU, or use backend=ort")
    try:
        import tensorrt as trt
    except ModuleNotFoundError as exc:
        if (exc.name or "tensorrt").split(".")[0] == "tensorrt":
            raise BackendUnavailable("tensorrt is not installed (needed by backend=trt)",
                                     fix=INSTALL_FIX) from exc
        raise BackendUnavailable("tensorrt is installed but could not be imported (needed by "
                                 "backend=trt)", value=first_line(exc), fix=reinstall) from exc
    except (ImportError, OSError) as exc:  # a wheel whose libnvinfer cannot be loaded
        raise BackendUnavailable("tensorrt is installed but could not be imported (needed by "
                                 "backend=trt)", value=first_line(exc), fix=reinstall) from exc
    version = getattr(trt, "__version__", "unknown")
    if tensorrt_major(version) < MIN_TENSORRT_MAJOR:
        raise BackendUnavailable(
            f"tensorrt {version} is too old: quantkit needs TensorRT >= {MIN_TENSORRT_MAJOR} "
            "(I/O tensor API, strongly typed networks)",
            fix=f"pip install -U 'tensorrt-cu12>={MIN_TENSORRT_MAJOR}', or use backend=ort")
    return trt


# ------------------------------------------------------------------------ CUDA runtime

def _version_tuple(version: str) -> tuple[int, ...]:
    out = []
    for part in str(version).split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
        if not part.isdigit():
            break
    return tuple(out)


def check_polygraphy_version(version: str) -> None:
    """polygraphy >= 0.53 (its CUDA loader finds the pip ``nvidia-cuda-runtime`` wheels)."""
    if _version_tuple(version)[:2] < MIN_POLYGRAPHY:
        need = ".".join(map(str, MIN_POLYGRAPHY))
        raise BackendUnavailable(
            f"polygraphy {version} is too old for backend=trt: quantkit needs polygraphy >= "
            f"{need}, whose CUDA loader finds a pip-installed libcudart", value=version,
            fix=f"pip install -U 'polygraphy>={need}'")


def tensorrt_cuda_major() -> int | None:
    """The CUDA major the installed TensorRT wheel is built for (``tensorrt-cu12`` -> 12), from
    the package metadata (no import); None when no such wheel is installed."""
    majors = set()
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
        if name.startswith("tensorrt-cu"):
            digits = "".join(c for c in name[len("tensorrt-cu"):].split("-")[0] if c.isdigit())
            if digits:
                majors.add(int(digits))
    return max(majors) if majors else None


def cuda_runtime_package(cuda_major: int | None) -> str:
    """The pip package with libcudart for a CUDA major: ``nvidia-cuda-runtime-cu12`` for 12
    (and 11); from CUDA 13 on NVIDIA ships it unsuffixed as ``nvidia-cuda-runtime``."""
    if cuda_major is None:
        return "nvidia-cuda-runtime-cu12"
    if cuda_major >= 13:
        return "nvidia-cuda-runtime"
    return f"nvidia-cuda-runtime-cu{cuda_major}"


def cudart_fix(cuda_major: int | None) -> str:
    """How to get libcudart for the installed TensorRT's CUDA major."""
    pkg = cuda_runtime_package(cuda_major)
    which = (f"the CUDA {cuda_major} runtime your tensorrt-cu{cuda_major} wheel needs"
             if cuda_major else "the CUDA runtime")
    pin = f"=={cuda_major}.*" if cuda_major and cuda_major >= 13 else ""
    return (f"install {which} (pip install '{pkg}{pin}', or the CUDA toolkit with libcudart on "
            "LD_LIBRARY_PATH) on a machine with an NVIDIA GPU, or use backend=ort")


def load_cudart():
    """libcudart as a ``ctypes.CDLL``, loaded the way polygraphy.cuda (>= 0.53) finds it."""
    try:
        version = metadata.version("polygraphy")
    except metadata.PackageNotFoundError as exc:
        raise BackendUnavailable("polygraphy is not installed (backend=trt loads the CUDA "
                                 "runtime through it)",
                                 fix="pip install 'polygraphy>=0.53'") from exc
    check_polygraphy_version(version)
    try:
        from polygraphy import cuda as pcuda

        return pcuda.wrapper().handle
    except Exception as exc:  # ImportError, OSError from ctypes, PolygraphyException
        raise BackendUnavailable("the CUDA runtime (libcudart) could not be loaded "
                                 "(needed by backend=trt)", value=first_line(exc),
                                 fix=cudart_fix(tensorrt_cuda_major())) from exc


def cuda_error(lib, status: int) -> str:
    """``cudaErrorMemoryAllocation: out of memory`` for a cudaError_t."""
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
    lib = load_cudart()
    count = ctypes.c_int(0)
    status = lib.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        reason = cuda_error(lib, status) if status != 0 else "0 devices"
        raise BackendUnavailable("no usable NVIDIA GPU (needed by backend=trt)", value=reason,
                                 fix="run on a machine with an NVIDIA GPU and a driver that "
                                     "supports this CUDA runtime (nvidia-smi must list the GPU), "
                                     "or use backend=ort")
    if not 0 <= device < count.value:
        raise BackendUnavailable("CUDA device index out of range", where="backend.trt.device",
                                 value=device,
                                 fix=f"set backend.trt.device to one of 0..{count.value - 1} "
                                     "(CUDA_VISIBLE_DEVICES renumbers them)")
    cc = []
    for attr in (_DEV_ATTR_CC_MAJOR, _DEV_ATTR_CC_MINOR):
        value = ctypes.c_int(0)
        status = lib.cudaDeviceGetAttribute(ctypes.byref(value), attr, device)
        if status != 0:
            raise BackendUnavailable("could not query the GPU's compute capability",
                                     value=cuda_error(lib, status),
                                     fix=cudart_fix(tensorrt_cuda_major()))
        cc.append(value.value)
    props = ctypes.create_string_buffer(_DEVICE_PROP_BYTES)
    getter = getattr(lib, "cudaGetDeviceProperties_v2", None) or lib.cudaGetDeviceProperties
    status = getter(props, device)
    if status != 0:
        raise BackendUnavailable("could not query the GPU's properties",
                                 value=cuda_error(lib, status),
                                 fix=cudart_fix(tensorrt_cuda_major()))
    name = props.raw[:256].split(b"\0", 1)[0].decode("ascii", "replace").strip()
    return GpuInfo(index=device, name=name, compute_capability=f"{cc[0]}.{cc[1]}")


def use_device(device: int) -> None:
    """Make ``device`` the calling thread's current CUDA device (TensorRT builds and runs there)."""
    lib = load_cudart()
    status = lib.cudaSetDevice(device)
    if status != 0:
        raise BackendUnavailable("could not select the CUDA device", where="backend.trt.device",
                                 value=device,
                                 fix=f"check the device index ({cuda_error(lib, status)})")


def require_cuda_runtime(device: int = 0):
    """``polygraphy.cuda`` (DeviceArray, Stream) once libcudart loads and GPU ``device`` is usable."""
    cuda_device_info(device)
    from polygraphy import cuda as pcuda

    return pcuda


def format_cuda_version(value: int) -> str:
    """CUDA's integer versions (``cudaRuntimeGetVersion``: 1000 * major + 10 * minor) -> "12.4"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def cuda_versions() -> dict[str, str | None]:
    """``{"cuda_runtime": "12.6", "cuda_driver": "12.4"}``: the libcudart version and the newest
    CUDA the installed driver supports."""
    lib = load_cudart()
    out: dict[str, str | None] = {}
    for key, fn in (("cuda_runtime", "cudaRuntimeGetVersion"), ("cuda_driver", "cudaDriverGetVersion")):
        value = ctypes.c_int(0)
        status = getattr(lib, fn)(ctypes.byref(value))
        out[key] = format_cuda_version(value.value) if status == 0 and value.value else None
    return out


def driver_version() -> str | None:
    """The NVIDIA driver release (e.g. ``"550.54.15"``) from NVML, or None where NVML is absent."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        buf = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf))) == 0
        nvml.nvmlShutdown()
        return buf.value.decode("ascii", "replace") if ok else None
    except AttributeError:
        return None


def gpu_environment(device: int = 0) -> dict[str, object]:
    """What a measurement on TensorRT depends on: TensorRT version, GPU name and compute
    capability, driver and CUDA versions of ``device``. Queried lazily (imports tensorrt, loads
    libcudart); ``BackendUnavailable`` with the fix where either is missing. Used for stage-cache
    keys (``quantkit.environment.execution_environment``) and ``record.host["gpu"]``."""
    trt = require_tensorrt()
    gpu = cuda_device_info(device)
    return {"tensorrt": trt.__version__, "device": gpu.index, "name": gpu.name,
            "compute_capability": gpu.compute_capability, "driver": driver_version(),
            **cuda_versions()}
