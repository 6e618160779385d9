"""lint_qdq and `python -m quantkit.cli.lint_cmd`: every rule seeded in a real graph, our output clean."""

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qdq_graphs import (act_matmul_model, conv_model, conv_transpose_model, gemm_model,
                        matmul_model, max_abs_ranges, mlp_model, random_feed, residual_model,
                        shared_input_model)
from quantkit.cli.lint_cmd import main as lint_main
from quantkit.precision.plan import build_plan
from quantkit.qdq.casts import convert_fp16
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.lint import RULES, lint_qdq


def _qdq(builder):
    model = builder()
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(2)])
    plan = build_plan(model, amax=amax)
    return insert_qdq(model, plan)[0], plan


def _init(model, name):
    return next(t for t in model.graph.initializer if t.name == name)


def _set_init(model, name, array):
    _init(model, name).CopyFrom(numpy_helper.from_array(np.asarray(array), name))


def _node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def _rules(violations):
    return {v.rule for v in violations}


@pytest.mark.parametrize("builder", [matmul_model, mlp_model, gemm_model, conv_model,
                                     conv_transpose_model, residual_model, shared_input_model,
                                     act_matmul_model])
def test_insert_qdq_output_lints_clean(builder):
    q, plan = _qdq(builder)
    assert lint_qdq(q) == []
    assert lint_qdq(convert_fp16(q, plan)) == []


def test_uint8_zero_point():
    q, _ = _qdq(matmul_model)
    _set_init(q, "x__zp_mm", np.array(0, np.uint8))
    v = lint_qdq(q)
    assert _rules(v) == {"zero-point-dtype"} and v[0].node == "x__QuantizeLinear_mm"


def test_missing_zero_point_means_uint8():
    q, _ = _qdq(matmul_model)
    node = _node(q, "x__QuantizeLinear_mm")
    del node.input[2]
    assert "zero-point-dtype" in _rules(lint_qdq(q))


def test_nonzero_zero_point():
    q, _ = _qdq(matmul_model)
    _set_init(q, "x__zp_mm", np.array(3, np.int8))
    assert _rules(lint_qdq(q)) == {"zero-point-nonzero"}


def test_per_tensor_weight_where_per_channel_is_expected():
    q, _ = _qdq(conv_model)
    _set_init(q, "W__scale_conv", np.array(0.01, np.float32))
    _set_init(q, "W__zp_conv", np.array(0, np.int8))
    for name in ("W__QuantizeLinear_conv", "W__DequantizeLinear_conv"):
        node = _node(q, name)
        kept = [a for a in node.attribute if a.name != "axis"]
        del node.attribute[:]
        node.attribute.extend(kept)
    v = lint_qdq(q)
    assert _rules(v) == {"weight-per-tensor"} and "axis 0" in v[0].message


def test_wrong_weight_axis():
    q, _ = _qdq(gemm_model)  # Gemm transB=1: output channels on axis 0
    for name in ("W__QuantizeLinear_fc", "W__DequantizeLinear_fc"):
        next(a for a in _node(q, name).attribute if a.name == "axis").i = 1
    v = lint_qdq(q)
    assert _rules(v) == {"weight-axis"} and len(v) == 2


def test_default_axis_on_conv_weight_is_wrong():
    q, _ = _qdq(conv_model)
    for name in ("W__QuantizeLinear_conv", "W__DequantizeLinear_conv"):
        node = _node(q, name)
        kept = [a for a in node.attribute if a.name != "axis"]
        del node.attribute[:]
        node.attribute.extend(kept)  # axis defaults to 1: the input channels
    assert _rules(lint_qdq(q)) == {"weight-axis"}


def test_non_constant_scale():
    q, _ = _qdq(matmul_model)
    scale = _init(q, "x__scale_mm")
    q.graph.initializer.remove(scale)
    q.graph.input.append(helper.make_tensor_value_info("x__scale_mm", TensorProto.FLOAT, []))
    v = lint_qdq(q)
    assert _rules(v) == {"scale-not-constant"} and len(v) == 2  # Q and DQ


@pytest.mark.parametrize("value", [0.0, -0.1, np.inf, np.nan])
def test_scale_not_positive_or_finite(value):
    q, _ = _qdq(matmul_model)
    _set_init(q, "x__scale_mm", np.array(value, np.float32))
    assert _rules(lint_qdq(q)) == {"scale-invalid"}


def test_unsupported_ops_from_onnxruntime_dynamic_quantization(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp_path / "fp32.onnx", tmp_path / "dyn.onnx"
    onnx.save(matmul_model(), src)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    v = lint_qdq(onnx.load(dst))
    assert "unsupported-op" in _rules(v)
    flagged = " ".join(x.message for x in v if x.rule == "unsupported-op")
    assert "DynamicQuantizeLinear" in flagged and "MatMulInteger" in flagged


def test_uint8_activations_from_onnxruntime_static_quantization(tmp_path):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    model = matmul_model()

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([random_feed(model, s) for s in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    src, dst = tmp_path / "fp32.onnx", tmp_path / "static.onnx"
    onnx.save(model, src)
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=False)
    rules = _rules(lint_qdq(onnx.load(dst)))
    assert {"zero-point-dtype", "weight-per-tensor"} <= rules


def test_nonfinite_tensor_is_not_to_be_quantized():
    q, _ = _qdq(act_matmul_model)
    v = lint_qdq(q, nonfinite_tensors={"k"})
    assert _rules(v) == {"nonfinite-quantized"} and v[0].node == "k__QuantizeLinear_bmm"


def test_dq_output_shared_by_two_consumers():
    q, _ = _qdq(shared_input_model)
    mm_b = _node(q, "mm_b")
    mm_b.input[0] = _node(q, "mm_a").input[0]  # both MatMuls now read x's DQ for mm_a
    v = [x for x in lint_qdq(q) if x.rule == "dq-shared"]
    assert len(v) == 1 and v[0].node == "x__DequantizeLinear_mm_a"


def test_q_not_followed_by_dq():
    q, _ = _qdq(matmul_model)
    q.graph.node.append(helper.make_node("Cast", ["x__q_mm"], ["x_int"], name="peek",
                                         to=TensorProto.FLOAT))
    q.graph.output.append(helper.make_tensor_value_info("x_int", TensorProto.FLOAT, None))
    v = lint_qdq(q)
    assert _rules(v) == {"q-without-dq"} and "Cast" in v[0].message


def test_rule_names_are_the_documented_ones():
    assert len(RULES) == len(set(RULES)) == 11  # + concat-shared-scale (issue 46)


# -- CLI ---------------------------------------------------------------------------------

def _bad_model_file(tmp_path):
    q, _ = _qdq(matmul_model)
    _set_init(q, "x__zp_mm", np.array(0, np.uint8))
    path = tmp_path / "bad.onnx"
    onnx.save(q, path)
    return path


def test_cli_clean_model_exits_0(tmp_path, capsys):
    path = tmp_path / "clean.onnx"
    onnx.save(_qdq(conv_model)[0], path)
    assert lint_main([str(path)]) == 0
    assert capsys.readouterr().out == ""


def test_cli_prints_one_violation_per_line_and_exits_1(tmp_path, capsys):
    assert lint_main([str(_bad_model_file(tmp_path))]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [  # the Q and the DQ share the zero point
        "zero-point-dtype x__QuantizeLinear_mm", "zero-point-dtype x__DequantizeLinear_mm"]
    assert "uint8" in lines[0]


def test_cli_json(tmp_path, capsys):
    assert lint_main([str(_bad_model_file(tmp_path)), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(d["rule"], d["node"]) for d in data] == [
        ("zero-point-dtype", "x__QuantizeLinear_mm"), ("zero-point-dtype", "x__DequantizeLinear_mm")]
    assert "uint8" in data[0]["message"]


def test_cli_nonfinite_option(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(_qdq(matmul_model)[0], path)
    assert lint_main([str(path), "--nonfinite", "x"]) == 1
    assert capsys.readouterr().out.startswith("nonfinite-quantized ")


@pytest.mark.parametrize("content", [None, b"this is not an onnx model", b""])
def test_cli_missing_or_corrupt_file_exits_2_with_one_line(tmp_path, capsys, content):
    path = tmp_path / "model.onnx"
    if content is not None:
        path.write_bytes(content)
    assert lint_main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


@pytest.mark.parametrize("command", [["quantkit", "lint"], ["quantkit.cli.lint_cmd"]],
                         ids=["quantkit-lint", "module"])
def test_cli_runs_as_documented(tmp_path, command):
    """`quantkit lint MODEL` (README) and `python -m quantkit.cli.lint_cmd MODEL` alike."""
    proc = subprocess.run([sys.executable, "-m", *command, str(_bad_model_file(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("zero-point-dtype x__QuantizeLinear_mm: ")
