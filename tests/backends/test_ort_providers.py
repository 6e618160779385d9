"""ONNX Runtime execution providers: CPU by default; CUDA / TensorRT EPs selectable in config,
refused for real (one clear error) where this onnxruntime build lacks them."""


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import quantkit
from quantkit.backends.ort import OrtRunner, check_providers, provider_args
from quantkit.errors import BackendError, BackendUnavailable, ConfigError

AVAILABLE = ort.get_available_providers()


def compose_settings(*overrides: str):
    return quantkit.configure(["experiment=bert_int8", *overrides])


def relu_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cpu_is_the_default():
    assert check_providers(None) == ["CPUExecutionProvider"]
    s = compose_settings()
    assert s.backend.providers == ["CPUExecutionProvider"] and s.backend.provider_options == {}
    with OrtRunner(relu_model(), providers=s.backend.providers) as r:
        assert r.session_.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(r.infer({"x": np.array([-1.0, 2.0], np.float32)})["y"],
                                      [0.0, 2.0])


@pytest.mark.parametrize("backend,provider", [("ort_cuda", "CUDAExecutionProvider"),
                                              ("ort_trt", "TensorrtExecutionProvider")])
def test_gpu_backends_compose_with_their_provider_options(backend, provider):
    s = compose_settings(f"backend={backend}")
    assert s.backend.name == "ort" and s.backend.providers[0] == provider
    assert s.backend.providers[-1] == "CPUExecutionProvider"
    assert provider in s.backend.provider_options
    args = provider_args(s.backend.providers, s.backend.provider_options)
    assert args[0][0] == provider and all(isinstance(v, str) for v in args[0][1].values())
    if backend == "ort_trt":
        opts = dict(args[0][1])
        assert opts["trt_int8_enable"] == "True" and opts["trt_fp16_enable"] == "False"


@pytest.mark.parametrize("provider", ["CUDAExecutionProvider", "TensorrtExecutionProvider"])
def test_missing_provider_refused_with_the_fix(provider):
    if provider in AVAILABLE:
        pytest.skip(f"{provider} is available here: the refusal cannot be observed")
    with pytest.raises(BackendUnavailable) as e:
        check_providers([provider, "CPUExecutionProvider"])
    msg = str(e.value)
    assert "\n" not in msg and provider in msg and "onnxruntime-gpu" in msg
    assert "CPUExecutionProvider" in msg  # what this build has
    assert "backend.providers" in msg
    with pytest.raises(BackendUnavailable):  # the runner refuses the same way
        with OrtRunner(relu_model(), providers=[provider]):
            pass


def test_cli_refuses_missing_provider_before_any_work(cli, tmp_path):
    if "CUDAExecutionProvider" in AVAILABLE:
        pytest.skip("CUDAExecutionProvider is available here")
    r = cli("experiment=bert_int8", "backend=ort_cuda", "progress=false",
            f"cache_dir={tmp_path / 'empty_cache'}", timeout=300)
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert any("CUDAExecutionProvider" in line and "onnxruntime-gpu" in line for line in err), \
        r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "empty_cache").exists() or not any((tmp_path / "empty_cache").rglob("*.onnx"))


def test_provider_options_must_name_a_requested_provider():
    with pytest.raises(ConfigError) as e:
        compose_settings("+backend.provider_options.CUDAExecutionProvider.device_id=0")
    assert "CUDAExecutionProvider" in str(e.value) and "backend.provider_options" in str(e.value)
    with pytest.raises(BackendError):
        provider_args(["CPUExecutionProvider"], {"CUDAExecutionProvider": {"device_id": 0}})


def test_provider_options_become_session_arguments():
    args = provider_args(["TensorrtExecutionProvider", "CPUExecutionProvider"],
                         {"TensorrtExecutionProvider": {"trt_int8_enable": True, "device_id": 0}})
    assert args == [("TensorrtExecutionProvider", {"trt_int8_enable": "True", "device_id": "0"}),
                    "CPUExecutionProvider"]
    # the (name, options) form opens a real session (CPU options are accepted, not reported)
    opts = {"CPUExecutionProvider": {"use_arena": "0"}}
    with OrtRunner(relu_model(), providers=["CPUExecutionProvider"], provider_options=opts) as r:
        assert r.session_.get_providers() == ["CPUExecutionProvider"]
