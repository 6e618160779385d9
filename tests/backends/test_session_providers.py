"""ONNX Runtime's silent provider fallback becomes one clear error (real sessions)."""

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from quantkit.backends.ort import OrtRunner
from quantkit.backends.providers import ORT_TRT_EP_TENSORRT_MAJOR, check_session_providers
from quantkit.errors import BackendError


def relu_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cpu_session():
    """A real session that runs on CPU only: what ONNX Runtime leaves after a GPU provider
    failed to initialise and it retried without it."""
    return ort.InferenceSession(relu_model().SerializeToString(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("provider, needs", [
    ("TensorrtExecutionProvider", f"TensorRT {ORT_TRT_EP_TENSORRT_MAJOR}.x"),
    ("CUDAExecutionProvider", "CUDA 12 and cuDNN 9"),
])
def test_fallback_to_cpu_is_refused_with_what_the_provider_needs(cpu_session, provider, needs):
    requested = [provider, "CPUExecutionProvider"]
    with pytest.raises(BackendError) as err:
        check_session_providers(cpu_session, requested)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"could not initialise {provider} and fell back to CPUExecutionProvider" in msg
    assert "backend.providers" in msg and needs in msg
    if provider == "TensorrtExecutionProvider":
        assert "TensorRT 11 does not load" in msg and "backend=trt" in msg


def test_pairs_with_options_are_read_like_names(cpu_session):
    requested = [("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"]
    with pytest.raises(BackendError, match="could not initialise CUDAExecutionProvider"):
        check_session_providers(cpu_session, requested)


def test_what_was_asked_for_passes(cpu_session, caplog):
    assert check_session_providers(cpu_session, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    with caplog.at_level(logging.WARNING):  # CPU reports no options: nothing to compare
        check_session_providers(cpu_session, [("CPUExecutionProvider", {"use_arena": "0"})])
    assert not caplog.records


def test_the_runner_checks_its_session():
    with OrtRunner(relu_model(), providers=["CPUExecutionProvider"]) as r:
        assert r.session_.get_providers() == ["CPUExecutionProvider"]
        np.testing.assert_array_equal(r.infer({"x": np.array([-1.0, 3.0], np.float32)})["y"],
                                      [0.0, 3.0])
