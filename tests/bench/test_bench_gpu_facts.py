"""Latency on TensorRT belongs to a GPU: its cache key and its label carry the TensorRT
version, GPU and compute capability, and the engine is timed on backend.trt.device."""

import importlib.util

import pytest

import quantkit
from quantkit.backends.engine_meta import EngineFile
from quantkit.backends.trt import TrtRunner
from quantkit.bench.stage import default_runner, execution_label, latency_key_facts
from quantkit.cache import stage_key
from quantkit.errors import BackendUnavailable

TENSORRT_PRESENT = importlib.util.find_spec("tensorrt") is not None


def compose_settings(*overrides: str):
    return quantkit.configure(["experiment=bert_int8", *overrides])


def gpu(**kw) -> dict:
    facts = {"tensorrt": "10.13.0.35", "device": 0, "name": "NVIDIA L4",
             "compute_capability": "8.9", "driver": "570.124.06", "cuda_runtime": "12.9",
             "cuda_driver": "12.8"}
    facts.update(kw)
    return facts


def env(**kw) -> dict:
    return {"cpu": "AMD EPYC", "cpu_isa": ["avx2"], "onnxruntime": "1.32.0", "gpu": gpu(**kw)}


@pytest.fixture(scope="module")
def trt_settings():
    return compose_settings("backend=trt", "backend.trt.device=1")


def key(settings, environment) -> str:
    return stage_key("latency", artifact="a" * 64, feeds="f" * 64,
                     **latency_key_facts(settings, environment))


def test_latency_key_follows_tensorrt_version_gpu_and_compute_capability(trt_settings):
    """Before: the key held the CPU host only, so an upgrade or another GPU sharing the stage
    cache reported the old GPU's latency as this run's."""
    base = key(trt_settings, env())
    assert key(trt_settings, env()) == base
    assert key(trt_settings, env(tensorrt="11.1.0.7")) != base
    assert key(trt_settings, env(name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")) != base
    assert key(trt_settings, env(compute_capability="9.0")) != base
    assert key(trt_settings, env(driver="580.65.06")) != base
    tf32 = compose_settings("backend=trt", "backend.trt.device=1", "backend.trt.tf32=true")
    assert key(tf32, env()) != base  # the backend settings are in it too


def test_trt_label_puts_the_gpu_in_host(trt_settings):
    label = execution_label(trt_settings, gpu=gpu(device=1))
    assert label["device"] == "GPU" and label["host"]["gpu"]["name"] == "NVIDIA L4"
    assert "NVIDIA L4" in label["caveat"] and "10.13.0.35" in label["caveat"]
    assert "CUDA events" in label["caveat"]
    cpu = execution_label(compose_settings())
    assert "gpu" not in cpu["host"] and cpu["device"] == "CPU"


@pytest.mark.skipif(TENSORRT_PRESENT, reason="tensorrt is installed: its absence cannot be observed")
def test_trt_label_without_tensorrt_says_how_to_install(trt_settings):
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        execution_label(trt_settings)


def test_the_engine_is_timed_on_backend_trt_device(trt_settings, tmp_path):
    """Before: the latency stage's TrtRunner always ran on device 0, whatever backend.trt.device."""
    runner = default_runner(trt_settings, "int8.mse", EngineFile(str(tmp_path / "m.engine")))
    assert isinstance(runner, TrtRunner) and runner.device == 1 and runner.name == "bench-int8.mse"
