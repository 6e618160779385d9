"""Triton model repository export of a run's candidate: config.pbtxt from the model's IO,
the signed file copied (sha256-checked), the structural validator, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.errors import ConfigError, ModelError
from quantkit.export.triton import (config_pbtxt, export_candidate, model_io, parse_pbtxt,
                                    validate_repository)
from quantkit.fsutil import sha256_file
from quantkit.models.model import Model
from quantkit.record.run_record import RunRecord


def classifier(batch="batch", seq="sequence") -> onnx.ModelProto:
    """input_ids / attention_mask int64 [batch, seq] -> logits float [batch, 2] (real graph)."""
    emb = numpy_helper.from_array(np.random.default_rng(0).standard_normal((100, 2)).astype(np.float32), "emb")
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "ax"], ["m3"]),
             helper.make_node("Mul", ["e", "m3"], ["em"]),
             helper.make_node("ReduceSum", ["em", "ax1"], ["logits"], keepdims=0)]
    inits = [emb, numpy_helper.from_array(np.array([2], np.int64), "ax"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    g = helper.make_graph(nodes, "cls",
                          [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
                           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, seq])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def make_run(tmp_path: Path, model: onnx.ModelProto | None = None, *, recommended="int8.mse",
             max_batch=48) -> Path:
    """A run directory as quantkit writes it: artifacts + record.json with their sha256."""
    run = tmp_path / "run"
    run.mkdir()
    model = model or classifier()
    fp32 = tmp_path / "cache_model.onnx"
    onnx.save(model, str(fp32))
    cands = {"fp32": {"artifact": fp32.name, "numerics": "FP32", "n": 10, "metrics": {}}}
    for name in ("fp16", "int8.mse"):
        path = run / f"model.{name}.onnx"
        onnx.save(model, str(path))
        cands[name] = {"artifact": path.name, "artifact_sha256": sha256_file(path),
                       "numerics": name, "n": 10, "metrics": {}, "verdict": _verdict("PASS")}
    model_facts = Model(path=str(fp32), sha256=sha256_file(fp32), input_names=["input_ids"],
                        output_name="logits", opset=17)
    record = {**RunRecord(experiment="bert_int8", run_dir=str(run), command="", seed=0,
                          config={"backend": {"name": "ort", "trt": {"max_batch": max_batch}}},
                          host={}, packages={}, model=model_facts).to_dict(),
              "recommended": recommended, "candidates": cands,
              "artifacts": {f"model.{n}.onnx": cands[n]["artifact_sha256"] for n in ("fp16", "int8.mse")}}
    (run / "record.json").write_text(json.dumps(record))
    return run


def _verdict(status: str) -> dict:
    """A candidate's verdict as the record keeps it (only the status matters here)."""
    return {"status": status, "reasons": [], "deltas": {}, "mcnemar": {"b": 0, "c": 0},
            "margin": {"kind": "relative", "value": 0.01, "abs": 0.0075, "metric": "accuracy",
                       "threshold": -0.0075},
            "n": 10, "required_n": None, "slices": [], "metric": "accuracy", "alpha": 0.05}


def test_export_recommended_candidate_to_onnxruntime_repository(tmp_path):
    run = make_run(tmp_path)
    model_dir = export_candidate(run)
    assert model_dir == run / "triton" / "bert_int8_int8_mse"
    assert (model_dir / "1" / "model.onnx").read_bytes() == (run / "model.int8.mse.onnx").read_bytes()
    cfg = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    assert cfg["name"] == ["bert_int8_int8_mse"] and cfg["platform"] == ["onnxruntime_onnx"]
    assert cfg["max_batch_size"] == [48]  # the run's engine profile maximum
    ins = {e["name"][0]: e for e in cfg["input"]}
    assert set(ins) == {"input_ids", "attention_mask"}
    assert ins["input_ids"]["data_type"] == ["TYPE_INT64"] and ins["input_ids"]["dims"] == [-1]
    out = cfg["output"][0]
    assert out["name"] == ["logits"] and out["data_type"] == ["TYPE_FP32"] and out["dims"] == [2]
    assert "dynamic_batching" in cfg
    check = validate_repository(model_dir)
    assert check, check.problems
    meta = json.loads((model_dir / "quantkit_export.json").read_text())
    assert meta["candidate"] == "int8.mse" and meta["recommended"] and meta["verdict"] == "PASS"
    # the exported file is a model ONNX Runtime runs, with the names the config declares
    sess = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([[1, 2, 3]], np.int64)
    y = sess.run(["logits"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    assert y.shape == (1, 2)


def test_candidate_out_name_and_fp32_from_the_model_cache(tmp_path):
    run = make_run(tmp_path)
    model_dir = export_candidate(run, candidate="fp32", out=tmp_path / "repo", model_name="minilm",
                                 max_batch_size=8)
    assert model_dir == tmp_path / "repo" / "minilm"
    assert parse_pbtxt((model_dir / "config.pbtxt").read_text())["max_batch_size"] == [8]
    assert validate_repository(model_dir)


def test_fixed_batch_model_has_max_batch_zero_and_full_dims(tmp_path):
    run = make_run(tmp_path, classifier(batch=1, seq=16))
    model_dir = export_candidate(run, max_batch_size=32)
    cfg = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    assert cfg["max_batch_size"] == [0] and "dynamic_batching" not in cfg
    assert cfg["input"][0]["dims"] == [1, 16] and cfg["output"][0]["dims"] == [1, 2]
    assert validate_repository(model_dir)


def test_refusals_say_what_and_how(tmp_path):
    run = make_run(tmp_path, recommended=None)
    with pytest.raises(ConfigError, match="recommends no candidate.*--candidate"):
        export_candidate(run)
    with pytest.raises(ConfigError, match="no such candidate"):
        export_candidate(run, candidate="int8.nope")
    with pytest.raises(ConfigError, match="no TensorRT engine for int8.mse.*backend=trt"):
        export_candidate(run, candidate="int8.mse", platform="tensorrt_plan")
    with pytest.raises(ConfigError, match="not a quantkit run directory"):
        export_candidate(tmp_path)
    # a file changed after sign-off is not exported
    (run / "model.fp16.onnx").write_bytes((run / "model.fp16.onnx").read_bytes() + b"\0")
    with pytest.raises(ModelError, match="sha256 mismatch"):
        export_candidate(run, candidate="fp16")
    assert not (run / "triton").exists()


def test_validator_finds_structural_problems(tmp_path):
    run = make_run(tmp_path)
    model_dir = export_candidate(run)
    cfg_path = model_dir / "config.pbtxt"
    good = cfg_path.read_text()
    cases = {
        'name: "other"': good.replace('name: "bert_int8_int8_mse"', 'name: "other"'),
        "data_type": good.replace("TYPE_FP32", "TYPE_FP16"),
        "dims": good.replace("dims: [ 2 ]", "dims: [ 3 ]"),
        "input names": good.replace('"attention_mask"', '"mask"'),
        "platform": good.replace("onnxruntime_onnx", "pytorch_libtorch"),
        "does not parse": good.replace("input [", "input [ {", 1),
    }
    for what, text in cases.items():
        cfg_path.write_text(text)
        check = validate_repository(model_dir)
        assert not check and check.problems, what
    cfg_path.write_text(good)
    assert validate_repository(model_dir)
    (model_dir / "1" / "model.onnx").unlink()
    check = validate_repository(model_dir)
    assert not check and "missing" in check.problems[0]


def test_pbtxt_parser_reads_what_triton_writes():
    text = '''# comment
name: "m"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP16, dims: [ 3, -1 ] } ]
instance_group [ { kind: KIND_GPU, count: 2 } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
parameters { key: "a" value: { string_value: "q\\"uote" } }
'''
    cfg = parse_pbtxt(text)
    assert cfg["name"] == ["m"] and cfg["max_batch_size"] == [8]
    assert cfg["input"][0]["dims"] == [3, -1] and cfg["input"][0]["data_type"] == ["TYPE_FP16"]
    assert cfg["instance_group"][0] == {"kind": ["KIND_GPU"], "count": [2]}
    assert cfg["dynamic_batching"][0]["preferred_batch_size"] == [4, 8]
    assert cfg["parameters"][0]["value"][0]["string_value"] == ['q"uote']
    for bad in ("name: ", "input [ { name: \"x\" ", "{ }"):
        with pytest.raises(ValueError):
            parse_pbtxt(bad)


def test_config_text_round_trips_through_the_parser():
    ins, outs = model_io(classifier())
    text = config_pbtxt("m", "tensorrt_plan", ins, outs, max_batch_size=16)
    cfg = parse_pbtxt(text)
    assert [e["name"][0] for e in cfg["input"]] == ["input_ids", "attention_mask"]
    assert cfg["instance_group"][0]["kind"] == ["KIND_GPU"]


def test_cli_exports_and_checks(tmp_path):
    run = make_run(tmp_path)
    r = subprocess.run([sys.executable, "-m", "quantkit.export.triton", str(run), "--out",
                        str(tmp_path / "repo")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == tmp_path / "repo" / "bert_int8_int8_mse"
    r = subprocess.run([sys.executable, "-m", "quantkit.export.triton", str(run),
                        "--platform", "tensorrt_plan"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no TensorRT engine" in r.stderr and "Traceback" not in r.stderr


def add_engine(run: Path, tmp_path: Path, candidate: str = "int8.mse") -> Path:
    """What a backend=trt run records for a candidate: the engine file in the engine cache
    and its metadata (the bytes stand for a serialized plan; nothing here parses them)."""
    plan = tmp_path / "engines" / "abc" / "model.engine"
    plan.parent.mkdir(parents=True)
    plan.write_bytes(bytes(range(256)) * 64)
    record = json.loads((run / "record.json").read_text())
    meta = {"tensorrt_version": "10.13.0.35", "gpu_name": "NVIDIA L4", "compute_capability": "8.9",
            "onnx_sha256": record["candidates"][candidate]["artifact_sha256"],
            "settings_sha256": "5e" * 32, "created": "2026-12-01T00:00:00Z",
            "engine_sha256": sha256_file(plan), "cache_key": "abc", "settings": {}, "schema": 1}
    record["candidates"][candidate]["engine"] = {
        "engine_path": str(plan), "meta": meta, "cache_hit": False,
        "trtexec": "trtexec --onnx=... --stronglyTyped", "layers_path": str(plan) + ".layers.json",
        "device": 0, "tf32": False, "engine_sha256": meta["engine_sha256"]}
    (run / "record.json").write_text(json.dumps(record))
    return plan


def test_plan_export_checks_the_signed_engine_and_records_where_it_runs(tmp_path):
    run = make_run(tmp_path)
    plan = add_engine(run, tmp_path)
    model_dir = export_candidate(run, platform="tensorrt_plan")
    assert (model_dir / "1" / "model.plan").read_bytes() == plan.read_bytes()
    info = json.loads((model_dir / "quantkit_export.json").read_text())
    assert info["tensorrt"]["tensorrt_version"] == "10.13.0.35"
    assert info["tensorrt"]["gpu_name"] == "NVIDIA L4"
    assert info["tensorrt"]["compute_capability"] == "8.9"
    assert info["tensorrt"]["engine_sha256"] == info["model_file_sha256"] == sha256_file(plan)
    assert validate_repository(model_dir)


def test_plan_rebuilt_after_sign_off_is_not_exported(tmp_path):
    """Before: the plan was copied from the engine cache unchecked; a cache entry rebuilt by a
    later run (other settings, another TensorRT) was exported as the signed candidate."""
    run = make_run(tmp_path)
    plan = add_engine(run, tmp_path)
    plan.write_bytes(plan.read_bytes()[::-1])
    with pytest.raises(ModelError, match="engine file differs from the one the run signed off"):
        export_candidate(run, platform="tensorrt_plan", out=tmp_path / "repo")
    assert not (tmp_path / "repo").exists()
    record = json.loads((run / "record.json").read_text())
    engine = record["candidates"]["int8.mse"]["engine"]
    engine["engine_sha256"] = engine["meta"]["engine_sha256"] = ""  # an engine built unhashed
    (run / "record.json").write_text(json.dumps(record))
    with pytest.raises(ModelError, match="recorded no sha256"):
        export_candidate(run, platform="tensorrt_plan", out=tmp_path / "repo")
