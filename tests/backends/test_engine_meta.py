"""Engine metadata: JSON round trip, refusal of engines built for another GPU/TensorRT, cache key."""

import json

import pytest

from quantkit.backends.engine_meta import (EngineMeta, check_compatible, engine_cache_key,
                                           format_compute_capability, load_meta, meta_path_for,
                                           settings_sha256, sm_name)
from quantkit.errors import BackendError

A100 = dict(tensorrt_version="10.8.0.43", gpu_name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")


def _meta(**over) -> EngineMeta:
    kw = dict(A100, onnx_sha256="ab" * 32, settings_sha256="cd" * 32,
              created="2025-01-02T03:04:05+00:00", engine_sha256="ef" * 32, cache_key="01" * 32,
              settings={"workspace_mb": 4096, "profiles": {"x": [[1, 8], [8, 8], [64, 8]]}})
    kw.update(over)
    return EngineMeta(**kw)


def test_round_trip_through_file(tmp_path):
    meta = _meta()
    path = meta.save(tmp_path / "sub" / "model.meta.json")
    assert path == tmp_path / "sub" / "model.meta.json"
    loaded = load_meta(path)
    assert loaded == meta
    assert loaded.to_dict() == json.loads(path.read_text())
    assert not list(path.parent.glob(".*.tmp"))  # atomic write left no temp file


def test_round_trip_through_json_and_normalizes_compute_capability():
    meta = _meta(compute_capability=(8, 9))
    assert meta.compute_capability == "8.9"
    assert EngineMeta.from_json(meta.to_json()) == meta
    assert format_compute_capability("sm_86") == "8.6"
    assert format_compute_capability("sm_100") == "10.0"
    assert sm_name("8.6") == "sm_86" and sm_name((12, 0)) == "sm_120"


def test_unknown_fields_are_ignored_for_forward_compatibility():
    data = _meta().to_dict()
    data["added_in_a_later_version"] = 1
    assert EngineMeta.from_dict(data) == _meta()


def test_meta_path_sits_beside_the_engine(tmp_path):
    assert meta_path_for(tmp_path / "model.engine") == tmp_path / "model.meta.json"


def test_same_machine_is_compatible():
    check_compatible(_meta(), tensorrt_version="10.8.0.43", gpu_name="NVIDIA A100-SXM4-80GB",
                     compute_capability=(8, 0))


def test_other_gpu_is_refused_with_the_fix(tmp_path):
    engine = tmp_path / "model.engine"
    with pytest.raises(BackendError) as err:
        check_compatible(_meta(), tensorrt_version="10.8.0.43", gpu_name="NVIDIA L4",
                         compute_capability="8.9", engine_path=engine)
    msg = str(err.value)
    assert msg == (
        "engine was built for NVIDIA A100-SXM4-80GB (sm_80) with TensorRT 10.8.0.43; this machine "
        "has NVIDIA L4 (sm_89)/TensorRT 10.8.0.43. Fix: rebuild the engine "
        f"(delete {engine} or run with backend.rebuild=true)")


def test_other_tensorrt_version_is_refused():
    with pytest.raises(BackendError, match=r"with TensorRT 10\.8\.0\.43; this machine has "
                                           r"NVIDIA A100-SXM4-80GB \(sm_80\)/TensorRT 11\.0\.0\.1"):
        check_compatible(_meta(), tensorrt_version="11.0.0.1", gpu_name="NVIDIA A100-SXM4-80GB",
                         compute_capability="8.0")


def test_same_gpu_name_other_compute_capability_is_refused():
    with pytest.raises(BackendError, match=r"\(sm_80\).*\(sm_86\)"):
        check_compatible(_meta(), tensorrt_version="10.8.0.43", gpu_name="NVIDIA A100-SXM4-80GB",
                         compute_capability="8.6")


def test_corrupt_json_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "model.meta.json"
    path.write_text('{"tensorrt_version": "10.8", "gpu_name": ')
    with pytest.raises(BackendError) as err:
        load_meta(path)
    msg = str(err.value)
    assert "engine metadata is not valid JSON" in msg and str(path) in msg
    assert "line 1" in msg and "backend.rebuild=true" in msg


def test_missing_field_and_wrong_types_are_reported(tmp_path):
    data = _meta().to_dict()
    del data["gpu_name"]
    with pytest.raises(BackendError, match="lacks a required field.*'gpu_name'"):
        EngineMeta.from_dict(data)
    with pytest.raises(BackendError, match="not a JSON object"):
        EngineMeta.from_json("[1, 2]")
    bad = _meta().to_dict()
    bad["tensorrt_version"] = 10
    with pytest.raises(BackendError, match="'tensorrt_version' is not a string"):
        EngineMeta.from_dict(bad)


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(BackendError, match="engine metadata file not found"):
        load_meta(tmp_path / "nope.meta.json")


KEY_ARGS = dict(onnx_sha256="ab" * 32, settings_dict={"workspace_mb": 4096, "profiles": {"x": [[1], [8], [64]]}},
                trt_version="10.8.0.43", gpu_name="NVIDIA A100-SXM4-80GB", cc="8.0")


def test_cache_key_is_stable_and_order_independent():
    key = engine_cache_key(**KEY_ARGS)
    assert len(key) == 64 and key == engine_cache_key(**KEY_ARGS)
    reordered = dict(KEY_ARGS, settings_dict={"profiles": {"x": [[1], [8], [64]]}, "workspace_mb": 4096},
                     cc=(8, 0))
    assert engine_cache_key(**reordered) == key


@pytest.mark.parametrize("field, value", [
    ("onnx_sha256", "ba" * 32),
    ("settings_dict", {"workspace_mb": 2048, "profiles": {"x": [[1], [8], [64]]}}),
    ("settings_dict", {"workspace_mb": 4096, "profiles": {"x": [[1], [8], [128]]}}),
    ("trt_version", "10.8.0.44"),
    ("gpu_name", "NVIDIA L4"),
    ("cc", "8.6"),
])
def test_cache_key_changes_when_any_input_changes(field, value):
    assert engine_cache_key(**dict(KEY_ARGS, **{field: value})) != engine_cache_key(**KEY_ARGS)


def test_settings_sha256_is_canonical():
    assert settings_sha256({"a": 1, "b": [1, 2]}) == settings_sha256({"b": [1, 2], "a": 1})
    assert settings_sha256({"a": 1}) != settings_sha256({"a": 2})
