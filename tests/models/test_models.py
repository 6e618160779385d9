"""ONNX loading checks and the linear head, on tiny graphs built in code, run in real ORT."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from quantkit.backends.ort import OrtRunner
from quantkit.errors import ModelError, first_line
from quantkit.models.model import inspect_onnx, write_model_atomic
from quantkit.models.torch_export import add_linear_head


def embed_model(opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    e = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["embedding"], name="relu")], "g", [x], [e])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_linear_head_computes_logits(tmp_path):
    rng = np.random.default_rng(0)
    coef, b = rng.normal(size=(2, 3)), rng.normal(size=2)
    m = add_linear_head(embed_model(), coef, b)
    onnx.checker.check_model(m)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    with OrtRunner(m) as r:
        out = r.infer({"x": x})
    np.testing.assert_allclose(out["logits"], np.maximum(x, 0) @ coef.T + b, rtol=1e-5, atol=1e-5)


def test_inspect_reports_io_and_opset(tmp_path):
    p = tmp_path / "m.onnx"
    sha = write_model_atomic(embed_model(), p)
    assert len(sha) == 64 and not list(tmp_path.glob(".*tmp"))
    _, inputs, output, opset = inspect_onnx(p)
    assert inputs == ["x"] and output == "embedding" and opset == 17


def test_truncated_file_is_one_clear_error(tmp_path):
    p = tmp_path / "m.onnx"
    write_model_atomic(embed_model(), p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError) as err:
        inspect_onnx(p)
    assert str(p) in str(err.value) and "Fix:" in str(err.value)


def test_old_opset_refused(tmp_path):
    p = tmp_path / "old.onnx"
    write_model_atomic(embed_model(opset=11), p)
    with pytest.raises(ModelError, match="opset"):
        inspect_onnx(p)


def test_unknown_output_refused(tmp_path):
    p = tmp_path / "m.onnx"
    write_model_atomic(embed_model(), p)
    with pytest.raises(ModelError, match="model.output"):
        inspect_onnx(p, output="logits")


def test_a_checker_error_without_a_message_is_still_one_clear_error(tmp_path, monkeypatch):
    """The fuzz test's find: onnx.checker raised with an empty message and the error line
    itself failed (IndexError on ``str(exc).splitlines()[0]``)."""
    p = tmp_path / "m.onnx"
    write_model_atomic(embed_model(), p)

    def silent(_model):
        raise onnx.checker.ValidationError("")

    monkeypatch.setattr(onnx.checker, "check_model", silent)
    with pytest.raises(ModelError) as err:
        inspect_onnx(p)
    assert "the ONNX model is invalid: ValidationError" in str(err.value)
    assert first_line(ValueError("\n  second line\nthird")) == "second line"
    assert first_line(KeyError()) == "KeyError"


def test_every_zoo_text_model_is_built_on_a_pinned_encoder_asset():
    """A zoo text model names the asset its encoder is exported from (ZOO_ENCODERS), and
    every conf/model/*.yaml zoo model is in the zoo."""
    from omegaconf import OmegaConf

    from quantkit.assets import ASSETS
    from quantkit.models import ZOO, ZOO_DETECTORS, ZOO_ENCODERS

    text = {n for n, kind in ZOO.items() if kind == "text"}
    assert set(ZOO_ENCODERS) == text and ZOO_ENCODERS["mpnet_sentiment"] == "mpnet"
    assert all(a in ASSETS for a in [*ZOO_ENCODERS.values(), *ZOO_DETECTORS.values()])
    conf = Path(__file__).resolve().parents[2] / "conf" / "model"
    zoo = {OmegaConf.load(p).name for p in conf.glob("*.yaml") if OmegaConf.load(p).kind == "zoo"}
    assert zoo <= set(ZOO) and "mpnet_sentiment" in zoo
