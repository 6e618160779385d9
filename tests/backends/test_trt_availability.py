"""What backend=trt needs from the machine, said before any work: polygraphy >= 0.53 (its
loader finds pip-installed libcudart), the CUDA runtime package for the installed TensorRT's
CUDA major, and the GPU facts every TensorRT measurement is keyed by and recorded with."""

import importlib.util
from importlib import metadata

import pytest

from quantkit.backends.trt import (MIN_POLYGRAPHY, check_polygraphy_version,
                                   cuda_runtime_package, cudart_fix, format_cuda_version,
                                   gpu_environment, tensorrt_cuda_major)
from quantkit.errors import BackendUnavailable
from quantkit.settings import BackendConfig

TENSORRT_PRESENT = importlib.util.find_spec("tensorrt") is not None
needs_no_tensorrt = pytest.mark.skipif(
    TENSORRT_PRESENT, reason="tensorrt is installed: the not-installed error cannot be observed")


def test_polygraphy_older_than_0_53_is_refused_with_the_pin():
    with pytest.raises(BackendUnavailable) as err:
        check_polygraphy_version("0.49.9")
    msg = str(err.value)
    assert "polygraphy 0.49.9 is too old" in msg and "pip install -U 'polygraphy>=0.53'" in msg
    for ok in ("0.53.0", "0.53.6", "0.54.1.dev0", "1.0"):
        check_polygraphy_version(ok)
    check_polygraphy_version(metadata.version("polygraphy"))  # what this venv has passes
    assert MIN_POLYGRAPHY == (0, 53)


def test_the_cuda_runtime_fix_names_the_package_of_the_tensorrt_cuda_major():
    """Before: the fix always said nvidia-cuda-runtime-cu12, also beside a tensorrt-cu13."""
    assert cuda_runtime_package(12) == "nvidia-cuda-runtime-cu12"
    assert cuda_runtime_package(13) == "nvidia-cuda-runtime"  # CUDA 13 wheels are unsuffixed
    assert "pip install 'nvidia-cuda-runtime==13.*'" in cudart_fix(13)
    assert "tensorrt-cu13" in cudart_fix(13)
    assert "pip install 'nvidia-cuda-runtime-cu12'" in cudart_fix(12) and "backend=ort" in cudart_fix(12)
    assert "nvidia-cuda-runtime-cu12" in cudart_fix(None)
    if not TENSORRT_PRESENT:
        assert tensorrt_cuda_major() is None  # no tensorrt-cuXX wheel installed here


def test_cuda_versions_are_read_like_nvidia_smi():
    assert format_cuda_version(12040) == "12.4"
    assert format_cuda_version(13010) == "13.1"
    assert format_cuda_version(11080) == "11.8"


@needs_no_tensorrt
def test_gpu_environment_says_how_to_install_where_tensorrt_is_missing():
    """Before: quantkit.environment called quantkit.backends.trt.gpu_environment, which did not
    exist (ImportError on every backend=trt cache key)."""
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed.*Fix:"):
        gpu_environment(0)
    from quantkit.environment import execution_environment

    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        execution_environment(BackendConfig(name="trt"))
    env = execution_environment(BackendConfig(name="ort"))
    assert "gpu" not in env and env["onnxruntime"]


@needs_no_tensorrt
def test_record_host_asks_for_the_gpu_on_backend_trt():
    """Before: record.host["gpu"] was always null, also on backend=trt."""
    from quantkit.environment import host_facts

    assert host_facts()["gpu"] is None and host_facts(BackendConfig(name="ort"))["gpu"] is None
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        host_facts(BackendConfig(name="trt"))


def test_gpu_environment_on_a_gpu():
    pytest.importorskip("tensorrt", reason="tensorrt is not installed (needs an NVIDIA GPU "
                                           "machine: pip install -e '.[tensorrt]')")
    try:
        env = gpu_environment(0)
    except BackendUnavailable as exc:
        pytest.skip(f"tensorrt is installed but no GPU is usable: {exc}")
    import tensorrt

    assert env["tensorrt"] == tensorrt.__version__ and env["name"] and env["device"] == 0
    major, minor = env["compute_capability"].split(".")
    assert major.isdigit() and minor.isdigit() and env["cuda_runtime"].count(".") == 1
