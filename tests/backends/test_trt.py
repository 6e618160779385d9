"""TensorRT backend. Profiles, the trtexec command, the layer-report parser and the
availability errors run here on CPU; building and running engines needs tensorrt and a GPU
and skips with the reason elsewhere."""

import importlib.util
import json
import shlex
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.engine_meta import EngineMeta, load_meta
from quantkit.backends.trt import (EngineSettings, ProfileError, TrtRunner, build_engine,
                                   check_int8_layers, cuda_device_info, engine_key_dict,
                                   layer_report, onnx_nodes_of, onnx_sha256, parse_layer_info,
                                   profiles_from_model, require_tensorrt, timing_cache_path,
                                   trtexec_command)
from quantkit.errors import BackendError, BackendUnavailable, ConfigError

TENSORRT_PRESENT = importlib.util.find_spec("tensorrt") is not None
needs_no_tensorrt = pytest.mark.skipif(
    TENSORRT_PRESENT, reason="tensorrt is installed: the not-installed error cannot be observed")


# --------------------------------------------------------------------------------------------
# Tiny real graphs
# --------------------------------------------------------------------------------------------

def _model(nodes, inputs, outputs, initializers=(), opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def bert_like(seq_dim="sequence") -> onnx.ModelProto:
    """input_ids/attention_mask [batch, sequence] int64 -> float sum (an encoder's inputs)."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq_dim])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq_dim])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq_dim])
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT, name="cast_ids"),
             helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT,
                              name="cast_mask"),
             helper.make_node("Add", ["ids_f", "mask_f"], ["y"], name="add")]
    return _model(nodes, [ids, mask], [out])


def image_model(h="height", w="width", batch="N") -> onnx.ModelProto:
    x = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [batch, 3, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, h, w])
    return _model([helper.make_node("Relu", ["pixels"], ["y"], name="relu")], [x], [y])


def static_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])


def qdq_conv_model(cin=16, cout=32, seed=0) -> onnx.ModelProto:
    """x[N,16,8,8] -> Q/DQ (per-tensor) -> Conv(W behind per-channel Q/DQ, axis 0) -> Relu."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.2, (cout, cin, 3, 3)).astype(np.float32)
    w_scale = (np.abs(w).reshape(cout, -1).max(axis=1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(rng.normal(0, 0.1, cout).astype(np.float32), "B"),
             numpy_helper.from_array(np.array(3.0 / 127, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
             numpy_helper.from_array(w_scale, "w_scale"),
             numpy_helper.from_array(np.zeros(cout, np.int8), "w_zp")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"], name="x_q"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"], name="x_dq"),
        helper.make_node("QuantizeLinear", ["W", "w_scale", "w_zp"], ["W_q"], name="w_q", axis=0),
        helper.make_node("DequantizeLinear", ["W_q", "w_scale", "w_zp"], ["W_dq"], name="w_dq", axis=0),
        helper.make_node("Conv", ["x_dq", "W_dq", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", cin, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", cout, 8, 8])
    return _model(nodes, [x], [y], inits)


def _save(model, path):
    onnx.save(model, str(path))
    return path


# --------------------------------------------------------------------------------------------
# Optimization profiles
# --------------------------------------------------------------------------------------------

def test_profiles_batch_and_sequence_ranges():
    s = EngineSettings(min_batch=1, opt_batch=8, max_batch=32, opt_sequence=128, max_sequence=512)
    assert profiles_from_model(bert_like(), s) == {
        "input_ids": ((1, 1), (8, 128), (32, 512)),
        "attention_mask": ((1, 1), (8, 128), (32, 512)),
    }


NO_SEQ = dict(opt_sequence=None, max_sequence=None)


def test_missing_sequence_range_names_input_and_dim():
    with pytest.raises(ProfileError) as err:
        profiles_from_model(bert_like(), EngineSettings(**NO_SEQ))
    msg = str(err.value)
    assert "input 'input_ids' dim 1 ('sequence') is dynamic and has no profile value" in msg
    assert "backend.trt.opt_sequence" in msg and "backend.trt.dim_overrides.sequence" in msg
    assert isinstance(err.value, BackendError) and isinstance(err.value, ConfigError)


def test_unnamed_dynamic_dim_is_reported_as_unnamed():
    model = bert_like()
    for vi in model.graph.input:
        vi.type.tensor_type.shape.dim[1].Clear()  # neither dim_value nor dim_param
    with pytest.raises(ProfileError, match=r"dim 1 \(unnamed\) is dynamic"):
        profiles_from_model(model, EngineSettings(**NO_SEQ))


def test_static_model_needs_no_profile():
    assert profiles_from_model(static_model(), EngineSettings()) == {}


def test_dim_overrides_by_dim_name_for_images_and_batch():
    s = EngineSettings(min_batch=2, opt_batch=4, max_batch=8,
                       dim_overrides={"height": [224, 224, 448], "width": (224, 320, 448)})
    assert profiles_from_model(image_model(), s) == {
        "pixels": ((2, 3, 224, 224), (4, 3, 224, 320), (8, 3, 448, 448))}
    s = EngineSettings(dim_overrides={"N": [1, 1, 1], "height": [32, 32, 32], "width": [32, 32, 32]})
    assert profiles_from_model(image_model(), s)["pixels"][2] == (1, 3, 32, 32)


def test_shape_overrides_replace_the_whole_triple_and_are_checked():
    model = image_model(h=224, w=224)
    s = EngineSettings(shape_overrides={"pixels": [[1, 3, 224, 224], [2, 3, 224, 224], [3, 3, 224, 224]]})
    assert profiles_from_model(model, s) == {
        "pixels": ((1, 3, 224, 224), (2, 3, 224, 224), (3, 3, 224, 224))}
    wrong_static = EngineSettings(shape_overrides={"pixels": [[1, 3, 224, 224]] * 2 + [[1, 3, 256, 224]]})
    with pytest.raises(ProfileError, match="changes static dim 2"):
        profiles_from_model(model, wrong_static)
    wrong_rank = EngineSettings(shape_overrides={"pixels": [[1, 3, 224], [1, 3, 224], [1, 3, 224]]})
    with pytest.raises(ProfileError, match="has rank 3; the model input has rank 4"):
        profiles_from_model(model, wrong_rank)
    unknown = EngineSettings(shape_overrides={"pixel": [[1], [1], [1]]})
    with pytest.raises(ProfileError, match="names an input the model does not have.*'pixel'"):
        profiles_from_model(model, unknown)


def test_initializers_listed_as_inputs_get_no_profile():
    model = bert_like()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "bias"))
    model.graph.input.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["n"]))
    s = EngineSettings(opt_sequence=16, max_sequence=32)
    assert set(profiles_from_model(model, s)) == {"input_ids", "attention_mask"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(min_batch=4, opt_batch=2), "min_batch <= opt_batch <= max_batch"),
    (dict(workspace_mb=0), "workspace_mb must be a positive integer"),
    (dict(opt_sequence=128, max_sequence=None), "set both backend.trt.opt_sequence and "
                                                "backend.trt.max_sequence"),
    (dict(device=-1), "backend.trt.device must be a non-negative integer"),
    (dict(image_range=[0, 1, 2]), "dimension range"),
    (dict(opt_sequence=600, max_sequence=512), "sequence range"),
    (dict(builder_optimization_level=7), "builder_optimization_level"),
    (dict(tensorrt_major=9), "tensorrt_major must be >= 10"),
    (dict(dim_overrides={"height": [3, 2, 1]}), "dimension range"),
    (dict(shape_overrides={"x": [[1, 2], [1, 2]]}), "three shapes of equal rank"),
])
def test_settings_are_validated(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        EngineSettings(**kwargs)


def test_key_dict_follows_the_engine_not_the_timing_cache_path():
    profiles = profiles_from_model(bert_like(), EngineSettings(opt_sequence=16, max_sequence=32))
    a = EngineSettings(opt_sequence=16, max_sequence=32, timing_cache="/a/cache.bin", device=0)
    b = EngineSettings(opt_sequence=16, max_sequence=32, timing_cache="/b/cache.bin", device=1,
                       rebuild=True)
    assert engine_key_dict(a, profiles) == engine_key_dict(b, profiles)
    c = EngineSettings(opt_sequence=16, max_sequence=32, workspace_mb=1024)
    assert engine_key_dict(c, profiles) != engine_key_dict(a, profiles)
    tf32 = EngineSettings(opt_sequence=16, max_sequence=32, tf32=True)
    assert engine_key_dict(tf32, profiles) != engine_key_dict(a, profiles)  # TF32 changes numerics
    assert engine_key_dict(a, profiles)["tf32"] is False  # off by default
    json.dumps(engine_key_dict(a, profiles))  # hashable as JSON


# --------------------------------------------------------------------------------------------
# trtexec command
# --------------------------------------------------------------------------------------------

def test_trtexec_command_matches_the_build(tmp_path):
    path = _save(bert_like(), tmp_path / "bert.onnx")
    s = EngineSettings(workspace_mb=2048, min_batch=1, opt_batch=8, max_batch=32,
                       opt_sequence=128, max_sequence=512, builder_optimization_level=4,
                       timing_cache=str(tmp_path / "timing.cache"))
    cmd = trtexec_command(path, s, engine_path=tmp_path / "out" / "bert.engine",
                          layer_info_path=tmp_path / "out" / "layers.json")
    assert shlex.split(cmd) == [
        "trtexec", f"--onnx={path}", "--stronglyTyped", "--noTF32",
        "--minShapes=input_ids:1x1,attention_mask:1x1",
        "--optShapes=input_ids:8x128,attention_mask:8x128",
        "--maxShapes=input_ids:32x512,attention_mask:32x512",
        "--memPoolSize=workspace:2048M", "--builderOptimizationLevel=4",
        "--profilingVerbosity=detailed", f"--timingCacheFile={tmp_path / 'timing.cache'}",
        f"--saveEngine={tmp_path / 'out' / 'bert.engine'}",
        f"--exportLayerInfo={tmp_path / 'out' / 'layers.json'}", "--skipInference"]
    for flag in ("--fp16", "--int8", "--best", "--bf16", "--fp8", "--precisionConstraints"):
        assert flag not in cmd  # precision lives in the graph
    s_tf32 = EngineSettings(opt_sequence=128, max_sequence=512, tf32=True)
    assert "--noTF32" not in shlex.split(trtexec_command(path, s_tf32))
    debug = shlex.split(trtexec_command(path, s, debug_tensors=["ids_f", "mask_f", "ids_f"]))
    assert "--markDebug=ids_f,mask_f" in debug


def test_a_debug_engine_is_its_own_cache_entry():
    profiles = profiles_from_model(bert_like(), EngineSettings())
    plain = engine_key_dict(EngineSettings(), profiles)
    debug = engine_key_dict(EngineSettings(), profiles, ["mask_f", "ids_f"])
    assert "debug_tensors" not in plain and debug["debug_tensors"] == ["ids_f", "mask_f"]
    assert engine_key_dict(EngineSettings(), profiles, ("ids_f", "mask_f")) == debug


def test_trtexec_command_static_model_defaults_and_quoting(tmp_path):
    path = _save(static_model(), tmp_path / "my model.onnx")
    args = shlex.split(trtexec_command(path, EngineSettings()))
    assert not any(a.startswith(("--minShapes", "--optShapes", "--maxShapes")) for a in args)
    assert f"--onnx={path}" in args and f"--saveEngine={tmp_path / 'my model.engine'}" in args
    assert "--memPoolSize=workspace:4096M" in args and "--timingCacheFile" not in " ".join(args)

    model = image_model(h=8, w=8)
    model.graph.input[0].name = "input:0"
    model.graph.node[0].input[0] = "input:0"
    path = _save(model, tmp_path / "tf.onnx")
    args = shlex.split(trtexec_command(path, EngineSettings(min_batch=1, opt_batch=2, max_batch=4)))
    assert "--optShapes='input:0':2x3x8x8" in args


def test_trtexec_command_reports_profile_errors(tmp_path):
    path = _save(bert_like(), tmp_path / "bert.onnx")
    with pytest.raises(ProfileError, match="'input_ids' dim 1"):
        trtexec_command(path, EngineSettings(**NO_SEQ))
    with pytest.raises(BackendError, match="ONNX model not found"):
        trtexec_command(tmp_path / "missing.onnx", EngineSettings())


# --------------------------------------------------------------------------------------------
# Layer report: inspector JSON parser and the INT8 check
# --------------------------------------------------------------------------------------------

SEP = "\x1f"  # TensorRT joins the ONNX layers of a fused layer with a control character

INSPECTOR_JSON = json.dumps({
    "Layers": [
        {"Name": "Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu1/Relu",
         "LayerType": "Reformat",
         "Inputs": [{"Name": "x", "Location": "Device", "Dimensions": [8, 16, 8, 8],
                     "Format/Datatype": "Row major linear FP32"}],
         "Outputs": [{"Name": "x_q", "Location": "Device", "Dimensions": [8, 16, 8, 8],
                      "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
         "ParameterType": "Reformat", "TacticValue": "0x0000000000000000"},
        {"Name": "/conv1/Conv + /relu1/Relu", "LayerType": "CaskConvolution",
         "Inputs": [{"Name": "x_q", "Location": "Device", "Dimensions": [8, 16, 8, 8],
                     "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
         "Outputs": [{"Name": "y1", "Location": "Device", "Dimensions": [8, 32, 8, 8],
                      "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format"}],
         "ParameterType": "Convolution", "Kernel": [3, 3],
         "TacticName": "sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32",
         "Metadata": SEP.join(["[ONNX Layer: /conv1/DequantizeLinear]", "[ONNX Layer: /conv1/Conv]",
                               "[ONNX Layer: /relu1/Relu]"])},
        {"Name": "/conv1/Conv_1", "LayerType": "CaskConvolution",
         "Inputs": [{"Name": "y1", "Format/Datatype": "Row major linear FP32"}],
         "Outputs": [{"Name": "y2", "Format/Datatype": "Row major linear FP32"}],
         "Metadata": "[ONNX Layer: /conv1/Conv_1]"},
        {"Name": "/fc/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "h", "Format/Datatype": "Row major linear FP32"},
                    {"Name": "W", "Format/Datatype": "Row major linear FP32"}],
         "Outputs": [{"Name": "o", "Format/Datatype": "Row major linear FP32"}],
         "Metadata": "[ONNX Layer: /fc/MatMul]"},
        {"Name": "/conv2/Conv + /conv2/Add", "LayerType": "CaskConvolution",  # no Metadata (TRT < 8.6)
         "Inputs": [{"Name": "a", "Format/Datatype": "Channel major INT8 format where channel % 16 == 0"}],
         "Outputs": [{"Name": "b", "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}]},
        {"Name": "{ForeignNode[/attn/MatMul.../attn/Softmax]}", "LayerType": "Myelin",
         "Inputs": [{"Name": "q", "Format/Datatype": "Half"}],
         "Outputs": [{"Name": "ctx", "Format/Datatype": "Half"}],
         "Metadata": SEP.join(["[ONNX Layer: /attn/MatMul]", "[ONNX Layer: /attn/MatMul_1]",
                               "[ONNX Layer: /attn/Softmax]"])},
        {"Name": "__myl_MulSumAdd_0", "LayerType": "kgen",
         "Inputs": [{"Name": "p", "Format/Datatype": "Int8"}],
         "Outputs": [{"Name": "r", "Format/Datatype": "Half"}],
         "Metadata": "[ONNX Layer: /proj/MatMul | /block (MyFunction)]"},
        {"Name": "/u8/Conv", "LayerType": "CaskConvolution",
         "Inputs": [{"Name": "u", "Format/Datatype": "Row major linear UInt8 format"}],
         "Outputs": [{"Name": "v", "Format/Datatype": "Row major linear FP32"}],
         "Metadata": "[ONNX Layer: /u8/Conv]"},
    ],
    "Bindings": ["x", "y2", "o", "b", "ctx", "r", "v"],
})


def test_parse_layer_info_accepts_text_dict_and_list():
    layers = parse_layer_info(INSPECTOR_JSON)
    assert len(layers) == 8 and layers[1]["Name"] == "/conv1/Conv + /relu1/Relu"
    assert parse_layer_info(json.loads(INSPECTOR_JSON)) == layers
    assert parse_layer_info(json.loads(INSPECTOR_JSON)["Layers"]) == layers
    assert parse_layer_info([{"LayerType": "Shuffle"}]) == [
        {"LayerType": "Shuffle", "Name": "<layer 0>", "Inputs": [], "Outputs": [], "Constants": []}]
    assert onnx_nodes_of(layers[1]) == ["/conv1/DequantizeLinear", "/conv1/Conv", "/relu1/Relu"]
    assert onnx_nodes_of(layers[6]) == ["/proj/MatMul"]
    assert onnx_nodes_of(layers[4]) == []


def test_names_only_and_invalid_reports_are_refused():
    names_only = json.dumps({"Layers": ["/conv1/Conv + /relu1/Relu", "/fc/MatMul"],
                             "Bindings": ["x", "o"]})
    with pytest.raises(BackendError, match="layer names only.*profilingVerbosity=detailed"):
        parse_layer_info(names_only)
    with pytest.raises(BackendError, match="not valid JSON"):
        parse_layer_info("{Layers: ")
    with pytest.raises(BackendError, match="no 'Layers' list"):
        parse_layer_info({"Bindings": []})


def test_check_int8_layers_per_planned_node():
    planned = ["/conv1/Conv", "/fc/MatMul", "/conv2/Conv", "/attn/MatMul_1", "/proj/MatMul",
               "/u8/Conv", "/missing/Conv"]
    result = check_int8_layers(parse_layer_info(INSPECTOR_JSON), planned)
    nodes = result["nodes"]
    assert nodes["/conv1/Conv"]["status"] == "int8"
    assert nodes["/conv1/Conv"]["matched_by"] == "metadata"
    assert nodes["/conv1/Conv"]["layers"] == ["/conv1/Conv + /relu1/Relu"]  # not the Reformat, not Conv_1
    assert nodes["/conv1/Conv"]["tactics"] == ["sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32"]
    assert nodes["/fc/MatMul"]["status"] == "not_int8"
    assert nodes["/conv2/Conv"] == {**nodes["/conv2/Conv"], "status": "int8", "matched_by": "name",
                                    "layers": ["/conv2/Conv + /conv2/Add"]}
    assert nodes["/attn/MatMul_1"]["status"] == "opaque"
    assert nodes["/proj/MatMul"]["status"] == "int8"  # kgen "Int8" format, function-stack metadata
    assert nodes["/u8/Conv"]["status"] == "not_int8"  # UInt8 is not INT8
    assert nodes["/missing/Conv"]["status"] == "not_found" and nodes["/missing/Conv"]["layers"] == []
    assert (result["n_planned"], result["n_int8"], result["n_not_int8"], result["n_opaque"],
            result["n_not_found"]) == (7, 3, 2, 1, 1)
    assert result["ok"] is False
    assert any("Int8" in f for f in nodes["/conv1/Conv"]["formats"])


def test_check_int8_layers_ok_when_every_planned_node_is_int8():
    result = check_int8_layers(INSPECTOR_JSON, ["/conv1/Conv", "/conv2/Conv"])
    assert result["ok"] is True and result["n_int8"] == 2
    assert check_int8_layers(INSPECTOR_JSON, [])["ok"] is False  # nothing planned: nothing shown


def test_int8_needs_an_int8_data_input_not_just_an_int8_output():
    """A GEMM whose epilogue absorbed the next Quantize writes Int8 but computed in FP16: that
    is reported as int8_output_only, not int8. A Reformat that writes Int8 never counts; on
    TensorRT 11 an Int8 entry in the layer's Constants (its weights) counts as reading INT8."""
    layers = [
        {"Name": "Reformatting CopyNode for Input Tensor 0 to /fc1/MatMul", "LayerType": "Reformat",
         "Inputs": [{"Name": "h", "Format/Datatype": "Row major linear FP16 format"}],
         "Outputs": [{"Name": "h8", "Format/Datatype": "Row major linear Int8 format"}],
         "Metadata": "[ONNX Layer: /fc1/MatMul]"},
        {"Name": "/fc1/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "h", "Format/Datatype": "Row major linear FP16 format"}],
         "Outputs": [{"Name": "q", "Format/Datatype": "Row major linear Int8 format"}],
         "Metadata": "[ONNX Layer: /fc1/MatMul]" + SEP + "[ONNX Layer: /fc2/QuantizeLinear]"},
        {"Name": "/fc2/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "a", "Format/Datatype": "Row major linear FP16 format"}],
         "Constants": [{"Name": "W2", "Format/Datatype": "Row major linear Int8 format"}],
         "Outputs": [{"Name": "b", "Format/Datatype": "Row major linear FP16 format"}],
         "Metadata": "[ONNX Layer: /fc2/MatMul]"},
    ]
    result = check_int8_layers(layers, ["/fc1/MatMul", "/fc2/MatMul"])
    fc1, fc2 = result["nodes"]["/fc1/MatMul"], result["nodes"]["/fc2/MatMul"]
    assert fc1["status"] == "int8_output_only" and fc1["layers"] == ["/fc1/MatMul"]
    assert fc1["int8_tensors"] == [] and fc1["int8_outputs"] == ["/fc1/MatMul:q"]
    assert fc2["status"] == "int8" and fc2["int8_tensors"] == ["/fc2/MatMul:W2"]
    assert (result["n_int8"], result["n_int8_output_only"], result["ok"]) == (1, 1, False)


def test_name_matching_without_metadata_respects_name_boundaries():
    layers = [{"Name": "{ForeignNode[/enc/l0/MatMul.../enc/l0/Add]}", "LayerType": "Myelin",
               "Inputs": [{"Name": "a", "Format/Datatype": "Int8"}], "Outputs": []},
              {"Name": "/enc/l0/MatMul_12", "LayerType": "gemm", "Inputs": [], "Outputs": []},
              {"Name": "PWN(/act/Sigmoid, /act/Mul)", "LayerType": "PointWiseV2",
               "Inputs": [{"Name": "s", "Format/Datatype": "Row major linear FP16 format"}],
               "Outputs": []}]
    nodes = check_int8_layers(layers, ["/enc/l0/MatMul", "/enc/l0/Add", "/l0/MatMul",
                                       "/act/Mul", "/act/Mu"])["nodes"]
    assert nodes["/enc/l0/MatMul"]["matched_by"] == "name"
    assert nodes["/enc/l0/MatMul"]["layers"] == ["{ForeignNode[/enc/l0/MatMul.../enc/l0/Add]}"]
    assert nodes["/enc/l0/Add"]["status"] == "int8"
    assert nodes["/l0/MatMul"]["status"] == "not_found"  # a suffix of another node's name
    assert nodes["/act/Mul"]["matched_by"] == "name-substring"
    assert nodes["/act/Mul"]["status"] == "not_int8"
    assert nodes["/act/Mu"]["status"] == "not_found"


# --------------------------------------------------------------------------------------------
# Availability (runs where tensorrt is absent)
# --------------------------------------------------------------------------------------------

@needs_no_tensorrt
def test_require_tensorrt_says_how_to_install():
    with pytest.raises(BackendUnavailable) as err:
        require_tensorrt()
    assert str(err.value) == (
        "tensorrt is not installed (needed by backend=trt). Fix: Install tensorrt on a machine "
        "with an NVIDIA GPU (pip install -e '.[tensorrt]'), or use backend=ort")


@needs_no_tensorrt
def test_gpu_entry_points_raise_backend_unavailable(tmp_path):
    path = _save(qdq_conv_model(), tmp_path / "m.onnx")
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        build_engine(path, EngineSettings(), cache_dir=tmp_path / "cache")
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        with TrtRunner(tmp_path / "m.engine"):
            pass
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        layer_report(tmp_path / "m.engine")


def test_trt_runner_is_a_runner_and_needs_its_with_block(tmp_path):
    from quantkit.backends.runner_protocol import Runner

    runner = TrtRunner(tmp_path / "m.engine", name="trt-int8")
    assert isinstance(runner, Runner) and runner.name == "trt-int8"
    with pytest.raises(BackendError, match="outside its `with` block"):
        runner.infer({"x": np.zeros((1, 4), np.float32)})


def test_cuda_device_info_reports_a_gpu_or_how_to_get_one():
    try:
        info = cuda_device_info()
    except BackendUnavailable as exc:
        assert "backend=trt" in str(exc) and "Fix:" in str(exc) and "backend=ort" in str(exc)
    else:
        major, minor = info.compute_capability.split(".")
        assert info.name and major.isdigit() and minor.isdigit()


def test_importing_the_backend_does_not_import_tensorrt():
    code = ("import sys, quantkit.backends.trt, quantkit.backends.engine_meta; "
            "assert 'tensorrt' not in sys.modules, 'tensorrt imported'; "
            "assert 'polygraphy' not in sys.modules, 'polygraphy imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_onnx_sha256_covers_external_data(tmp_path):
    model = qdq_conv_model()
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    before = onnx_sha256(path)
    data = tmp_path / "ext.data"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert onnx_sha256(path) != before and len(before) == 64


# --------------------------------------------------------------------------------------------
# GPU: build, run, compare with ONNX Runtime (skipped without tensorrt and a GPU)
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu():
    pytest.importorskip("tensorrt", reason="tensorrt is not installed (needs an NVIDIA GPU "
                                           "machine: pip install -e '.[tensorrt]')")
    try:
        return cuda_device_info()
    except BackendUnavailable as exc:
        pytest.skip(f"tensorrt is installed but no GPU is usable: {exc}")


SMALL = dict(workspace_mb=256, min_batch=1, opt_batch=4, max_batch=8, builder_optimization_level=2)


@pytest.fixture(scope="module")
def built(gpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("trt")
    path = _save(qdq_conv_model(), root / "conv_qdq.onnx")
    settings = EngineSettings(**SMALL, timing_cache=str(root / "timing.cache"))
    return path, settings, root, build_engine(path, settings, cache_dir=root / "engines")


def test_engine_matches_onnx_runtime(built):
    from quantkit.backends.ort import OrtRunner

    path, _, _, art = built
    rng = np.random.default_rng(1)
    with TrtRunner(art.engine_path) as trt_runner, OrtRunner(path) as ort_runner:
        for batch in (1, 3, 8):
            feed = {"x": rng.normal(0, 1, (batch, 16, 8, 8)).astype(np.float32)}
            got = trt_runner.infer(feed)["y"]
            want = ort_runner.infer(feed)["y"]
            assert got.shape == want.shape == (batch, 32, 8, 8)
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


def test_engine_files_metadata_and_int8_layers(built, gpu):
    _, settings, root, art = built
    assert not art.cache_hit and art.engine_path.is_file() and art.layers_path.is_file()
    meta = load_meta(art.meta_path)
    assert meta == art.meta and meta.gpu_name == gpu.name
    assert meta.compute_capability == gpu.compute_capability
    assert meta.settings["profiles"] == {"x": [[1, 16, 8, 8], [4, 16, 8, 8], [8, 16, 8, 8]]}
    import tensorrt

    tc = timing_cache_path(root / "timing.cache", tensorrt.__version__, gpu)
    assert tc.stat().st_size > 0 and f"--timingCacheFile={tc}" in art.trtexec
    assert "--stronglyTyped" in art.trtexec and f"--saveEngine={art.engine_path}" in art.trtexec
    layers = parse_layer_info(art.layers_path.read_text())
    check = check_int8_layers(layers, ["conv"])
    assert check["nodes"]["conv"]["status"] == "int8", check["nodes"]["conv"]
    assert layer_report(art.engine_path) == layers


def test_second_build_is_a_cache_hit_and_rebuild_is_not(built, tmp_path):
    path, settings, root, art = built
    again = build_engine(path, settings, cache_dir=root / "engines")
    assert again.cache_hit and again.engine_path == art.engine_path and again.meta == art.meta
    cache = tmp_path / "engines"  # own cache: the forced rebuild below rewrites its entry
    first = build_engine(path, settings, cache_dir=cache)
    assert not first.cache_hit and first.meta.cache_key == art.meta.cache_key
    other = build_engine(path, EngineSettings(**dict(SMALL, max_batch=16)), cache_dir=cache)
    assert not other.cache_hit and other.engine_path != first.engine_path
    forced = build_engine(path, settings, cache_dir=cache, rebuild=True)
    assert not forced.cache_hit and forced.engine_path == first.engine_path
    assert build_engine(path, settings, cache_dir=cache).cache_hit


def test_runner_refuses_bad_feeds(built):
    *_, art = built
    with TrtRunner(art.engine_path) as r:
        assert r.input_names == ["x"] and r.output_names == ["y"]
        with pytest.raises(BackendError, match="has dtype float64; the engine expects float32"):
            r.infer({"x": np.zeros((1, 16, 8, 8))})
        with pytest.raises(BackendError, match="outside the engine's optimization profile"):
            r.infer({"x": np.zeros((9, 16, 8, 8), np.float32)})
        with pytest.raises(BackendError, match="feed lacks an engine input"):
            r.infer({})
    with pytest.raises(BackendError, match="outside its `with` block"):
        r.infer({"x": np.zeros((1, 16, 8, 8), np.float32)})


def test_runner_refuses_an_engine_built_for_another_gpu(built, tmp_path):
    *_, art = built
    engine = tmp_path / "copy.engine"
    engine.write_bytes(art.engine_path.read_bytes())
    other = EngineMeta(**{**art.meta.to_dict(), "gpu_name": "Some Other GPU", "compute_capability": "5.0"})
    other.save(tmp_path / "copy.meta.json")
    with pytest.raises(BackendError, match=r"engine was built for Some Other GPU \(sm_50\)"):
        with TrtRunner(engine):
            pass


def test_parser_errors_are_joined_in_one_message(gpu, tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery", domain="com.example")
    graph = helper.make_graph([node], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.example", 1)])
    path = _save(model, tmp_path / "bad.onnx")
    with pytest.raises(BackendError, match=r"TensorRT could not parse the ONNX model \(\d+ error"):
        build_engine(path, EngineSettings(**SMALL), cache_dir=tmp_path / "engines")


def test_check_fp8_layers_counts_fp8_inputs_not_int8_ones():
    """dtype="fp8": a GEMM reading FP8 data (TensorRT's kFP8, "... FP8 format (kLINEAR)") runs
    FP8; one reading Int8 or FP16 does not; the statuses and counts say fp8."""
    report = json.dumps({"Layers": [
        {"Name": "/q/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "x_q", "Format/Datatype": "Row major linear FP8 format (kLINEAR)"},
                    {"Name": "w_q", "Format/Datatype": "Row major linear FP8 format (kLINEAR)"}],
         "Outputs": [{"Name": "y", "Format/Datatype": "Row major linear FP16 format (kLINEAR)"}],
         "Metadata": "[ONNX Layer: /q/MatMul]"},
        {"Name": "/k/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "x_i", "Format/Datatype": "Row major linear Int8 format"}],
         "Outputs": [{"Name": "k", "Format/Datatype": "Row major linear FP16 format (kLINEAR)"}],
         "Metadata": "[ONNX Layer: /k/MatMul]"},
        {"Name": "/v/MatMul", "LayerType": "gemm",
         "Inputs": [{"Name": "x", "Format/Datatype": "Row major linear FP16 format (kLINEAR)"}],
         "Outputs": [{"Name": "v", "Format/Datatype": "Row major linear FP16 format (kLINEAR)"}],
         "Metadata": "[ONNX Layer: /v/MatMul]"}]})
    result = check_int8_layers(report, ["/q/MatMul", "/k/MatMul", "/v/MatMul"], dtype="fp8")
    assert {n: v["status"] for n, v in result["nodes"].items()} == {
        "/q/MatMul": "fp8", "/k/MatMul": "not_fp8", "/v/MatMul": "not_fp8"}
    assert (result["n_fp8"], result["n_not_fp8"], result["ok"]) == (1, 2, False)
    assert result["nodes"]["/q/MatMul"]["fp8_tensors"] == ["/q/MatMul:x_q", "/q/MatMul:w_q"]
    assert check_int8_layers(report, ["/k/MatMul"])["n_int8"] == 1  # INT8's check unchanged
    with pytest.raises(ValueError, match="dtype"):
        check_int8_layers(report, ["/q/MatMul"], dtype="int4")
