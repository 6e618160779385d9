"""benchmarks/accuracy_vs_peers.py and benchmarks/peers.py on a tiny built graph.

The peers run for real: ONNX Runtime's quantize_static in this venv, NVIDIA ModelOpt in its
own venv (skipped where that venv does not exist). The summary line's columns are each
peer's best over its measured configurations, and "na" where none was measured.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy_vs_peers as avp  # noqa: E402
import peers  # noqa: E402

#: a venv with nvidia-modelopt[onnx] (the benchmark's --modelopt-venv); unset: those tests skip
MODELOPT_VENV = Path(os.environ.get("QUANTKIT_MODELOPT_VENV") or "/nonexistent/venv-modelopt")


def _tiny_mlp(path: Path, rng: np.random.Generator) -> None:
    """x[N, 8, 16] -> MatMul(16x32) -> Relu -> MatMul(32x4) -> logits[N, 8, 4] (8 tokens:
    ModelOpt leaves GEMV-shaped MatMuls, m = 1, unquantized)."""
    w1 = numpy_helper.from_array(rng.normal(size=(16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(size=(32, 4)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["logits"], name="fc2")]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 8, 4])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _logits(path: Path, x: np.ndarray) -> np.ndarray:
    from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner

    with OrtRunner(str(path), name=path.stem, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS,
                   qdq_mode="exact") as r:
        return r.infer({"x": x}, ["logits"])["logits"]


def test_line_takes_quantkits_choice_each_peers_best_and_na_for_an_unmeasured_peer():
    rows = [avp.Row("fp32", "-", 0.80, 1.0),
            avp.Row("quantkit", "int8.minmax", 0.81, 0.99),
            avp.Row("quantkit", "int8.mse (chosen on dev)", 0.79, 0.97, chosen=True),
            avp.Row("quantkit", "int8.entropy", None, None, "not chosen"),
            avp.Row("ort", "minmax", 0.70, 0.91), avp.Row("ort", "entropy", 0.75, 0.88),
            avp.Row("modelopt", "max", None, None, "failed")]
    line = avp.ModelComparison("m", "", rows).line()
    assert line == ("model=m acc_fp32=0.8000 acc_quantkit=0.7900 agree_quantkit=0.9700 "
                    "acc_ort=0.7500 agree_ort=0.9100 acc_modelopt=na agree_modelopt=na")


def test_fp8_fields_take_quantkits_fp8_choice_and_modelopts_best_fp8_only():
    rows = [avp.Row("fp32", "-", 0.80, 1.0, fmt="fp32"),
            avp.Row("quantkit", "int8.minmax (chosen on dev)", 0.79, 0.97, chosen=True),
            avp.Row("quantkit", "fp8.minmax (chosen on dev)", 0.78, 0.96, chosen=True,
                    fmt="fp8"),
            avp.Row("quantkit", "fp8.mse", None, None, "not chosen", fmt="fp8"),
            avp.Row("ort", "minmax", 0.70, 0.91),
            avp.Row("modelopt", "max, high precision fp16", 0.77, 0.95),
            avp.Row("modelopt", "fp8 max, high precision fp16", 0.76, 0.94, fmt="fp8"),
            avp.Row("modelopt", "fp8 max, high precision fp32", 0.75, 0.98, fmt="fp8")]
    line = avp.ModelComparison("m", "", rows, fp8=True).line()
    assert line == ("model=m acc_fp32=0.8000 acc_quantkit=0.7900 agree_quantkit=0.9700 "
                    "acc_ort=0.7000 agree_ort=0.9100 acc_modelopt=0.7700 agree_modelopt=0.9500 "
                    "acc_quantkit_fp8=0.7800 agree_quantkit_fp8=0.9600 "
                    "acc_modelopt_fp8=0.7600 agree_modelopt_fp8=0.9800")
    assert "fp8" not in avp.ModelComparison("m", "", rows).line()  # --no-fp8: INT8's line


def test_models_are_all_or_a_comma_list_of_known_experiments():
    assert avp.parse_models("all") == list(avp.MODELS)
    assert avp.parse_models("mobilenet_int8,bert_int8") == ["mobilenet_int8", "bert_int8"]
    with pytest.raises(SystemExit, match="not among"):
        avp.parse_models("bert_int8,resnet")


def test_ort_quantize_writes_tensorrt_style_qdq_close_to_fp32(tmp_path):
    rng = np.random.default_rng(0)
    src, out = tmp_path / "fp32.onnx", tmp_path / "ort.onnx"
    _tiny_mlp(src, rng)
    x = rng.normal(size=(64, 8, 16)).astype(np.float32)
    peers.ort_quantize(src, out, [{"x": x[i:i + 16]} for i in range(0, 64, 16)],
                       method="minmax", op_types=("MatMul",))
    m = onnx.load(str(out))
    q = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert q, "no QuantizeLinear inserted"
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    zps = [inits[n.input[2]] for n in q if len(n.input) > 2 and n.input[2] in inits]
    assert zps and all(z.dtype == np.int8 and not z.any() for z in zps)  # signed, symmetric
    ref, got = _logits(src, x), _logits(out, x)
    assert not np.array_equal(ref, got)  # quantized
    assert np.abs(ref - got).max() < 0.1 * np.abs(ref).max()


needs_modelopt = pytest.mark.skipif(
    not (MODELOPT_VENV / "bin" / "python").exists(),
    reason="set QUANTKIT_MODELOPT_VENV to a venv with nvidia-modelopt[onnx] (python "
           "benchmarks/accuracy_vs_peers.py creates one under the quantkit cache)")


def _modelopt_setup(tmp_path: Path, seed: int) -> tuple[Path, Path, np.ndarray]:
    """(ModelOpt's python, the tiny FP32 model, its calibration input saved as calib.npz)."""
    rng = np.random.default_rng(seed)
    src = tmp_path / "fp32.onnx"
    _tiny_mlp(src, rng)
    x = rng.normal(size=(32, 8, 16)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=x)
    python, note = avp.ensure_modelopt_venv(MODELOPT_VENV)
    assert python is not None, note
    return python, src, x


@needs_modelopt
def test_modelopt_quantizes_a_copy_and_reports_a_failing_configuration(tmp_path):
    python, src, x = _modelopt_setup(tmp_path, 1)
    out = tmp_path / "mo.onnx"
    before = src.read_bytes()
    err = avp.modelopt_quantize(python, src, out, tmp_path / "calib.npz", tmp_path,
                                method="max", high_precision="fp32", op_types=("MatMul",))
    assert err is None
    assert src.read_bytes() == before  # ModelOpt got a copy
    assert any(n.op_type == "QuantizeLinear" for n in onnx.load(str(out)).graph.node)
    ref, got = _logits(src, x), _logits(out, x)
    assert np.abs(ref - got).max() < 0.1 * np.abs(ref).max()
    np.savez(tmp_path / "wrong.npz", not_an_input=x)  # ModelOpt asserts on input names
    bad = avp.modelopt_quantize(python, src, tmp_path / "bad.onnx", tmp_path / "wrong.npz",
                                tmp_path, method="entropy", high_precision="fp32",
                                op_types=("MatMul",))
    assert bad and bad.startswith("modelopt int8 entropy/fp32 failed (rc 1)"), bad
    assert not (tmp_path / "bad.onnx").exists()


@needs_modelopt
def test_modelopt_fp8_writes_float8_qdq_that_runs_exactly_close_to_fp32(tmp_path):
    python, src, x = _modelopt_setup(tmp_path, 2)
    out = tmp_path / "mo8.onnx"
    err = avp.modelopt_quantize(python, src, out, tmp_path / "calib.npz", tmp_path, mode="fp8",
                                method="max", high_precision="fp32", op_types=("MatMul",))
    assert err is None, err
    m = onnx.load(str(out))
    inits = {i.name: i for i in m.graph.initializer}
    q = [n for n in m.graph.node if n.op_type == "QuantizeLinear"]
    assert q and all(inits[n.input[2]].data_type == TensorProto.FLOAT8E4M3FN for n in q
                     if len(n.input) > 2 and n.input[2] in inits)
    ref, got = _logits(src, x), _logits(out, x)
    assert not np.array_equal(ref, got)  # quantized
    assert np.abs(ref - got).max() < 0.1 * np.abs(ref).max()
