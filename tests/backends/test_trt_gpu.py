"""TensorRT on a GPU: what only a real engine shows (INT8 layers, TF32 off, GPU timing with CUDA
events and CUDA graphs, timing-cache merging, CUDA errors as BackendErrors, debug tensors).
Collected everywhere; skipped with the reason where tensorrt or a GPU is missing."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.backends.trt import (EngineSettings, TrtRunner,
                                   build_engine, check_int8_layers, parse_layer_info,
                                   timing_cache_path)
from quantkit.errors import BackendError

from test_trt import gpu, qdq_conv_model  # noqa: F401 (fixture); same directory, prepend mode

SMALL = dict(workspace_mb=256, min_batch=1, opt_batch=4, max_batch=8, builder_optimization_level=2)


@pytest.fixture(scope="module")
def conv(gpu, tmp_path_factory):
    root = tmp_path_factory.mktemp("trtgpu")
    path = root / "conv.onnx"
    onnx.save(qdq_conv_model(), str(path))
    s = EngineSettings(**SMALL, timing_cache=str(root / "tc"))
    return path, s, root, build_engine(path, s, cache_dir=root / "engines")


def fp32_matmul_model(k=256) -> onnx.ModelProto:
    """x[N, k] @ W[k, 4]: with TF32 the inputs lose their low mantissa bits."""
    w = np.full((k, 4), 1.0 + 2.0 ** -11, np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [numpy_helper.from_array(w, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_planned_int8_conv_reads_int8(conv):  # item 4
    *_, art = conv
    check = check_int8_layers(parse_layer_info(art.layers_path.read_text()), ["conv"])
    node = check["nodes"]["conv"]
    assert node["status"] == "int8" and node["int8_tensors"], node


def test_fp32_layers_do_not_run_tf32_by_default(gpu, tmp_path):  # item 5
    path = tmp_path / "mm.onnx"
    onnx.save(fp32_matmul_model(), str(path))
    art = build_engine(path, EngineSettings(**SMALL), cache_dir=tmp_path / "engines")
    assert art.meta.settings["tf32"] is False and "--noTF32" in art.trtexec
    x = np.full((2, 256), 1.0 + 2.0 ** -11, np.float32)
    with TrtRunner(art.engine_path) as r, OrtRunner(str(path)) as o:
        got, want = r.infer({"x": x})["y"], o.infer({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4)  # TF32 rounds 1+2^-11 to 1: off by ~1e-3


def test_gpu_timing_with_cuda_events_and_graphs(conv):  # item 6
    from quantkit.bench.gpu_timing import time_on_device

    *_, art = conv
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.normal(0, 1, (b, 16, 8, 8)).astype(np.float32)} for b in (1, 4, 8)]
    with TrtRunner(art.engine_path) as r:
        for graphs in (False, True):
            t = time_on_device(r, feeds, warmup=1, min_repeats=6, max_repeats=6, max_seconds=0,
                               cuda_graphs=graphs)
            assert t.n == 6 and t.warmup == 3 and np.all(t.latencies_ms > 0)
            assert t.h2d_ms.shape == (3,) and np.all(t.h2d_ms > 0) and t.cuda_graphs is graphs
        out = r.infer(feeds[2])["y"]  # still a working runner after timing
    with OrtRunner(str(conv[0])) as o:
        want = o.infer(feeds[2])["y"]
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


def test_timing_cache_is_keyed_and_kept_across_builds(conv, gpu):  # item 10
    import tensorrt

    path, s, root, _ = conv
    tc = timing_cache_path(root / "tc", tensorrt.__version__, gpu)
    size = tc.stat().st_size
    assert size > 0
    build_engine(path, EngineSettings(**dict(SMALL, max_batch=16), timing_cache=str(root / "tc")),
                 cache_dir=root / "engines")
    assert tc.stat().st_size >= size  # merged, not replaced by the second build's alone


def test_cuda_allocation_failure_names_the_tensor_and_the_fix(conv):  # item 11
    *_, art = conv
    with TrtRunner(art.engine_path) as r:
        with pytest.raises(BackendError) as err:
            r._device_buffer("x", 1 << 46)  # 256 TiB of float32
        msg = str(err.value)
        assert "CUDA could not allocate device memory for tensor 'x'" in msg
        assert art.engine_path.name in msg and "Fix:" in msg


def test_debug_tensors_match_onnx_runtime(conv):  # item 13
    path, s, root, _ = conv
    dbg = build_engine(path, s, cache_dir=root / "engines", debug_tensors=["c"])
    assert dbg.meta.settings["debug_tensors"] == ["c"] and "--markDebug=c" in dbg.trtexec
    x = np.random.default_rng(2).normal(0, 1, (2, 16, 8, 8)).astype(np.float32)
    with TrtRunner(dbg.engine_path, debug=True) as r, \
            OrtRunner(str(path), extra_outputs=["c"]) as o:
        got, want = r.infer({"x": x}, ["y", "c"]), o.infer({"x": x}, ["y", "c"])
    assert got["c"].shape == want["c"].shape == (2, 32, 8, 8)
    np.testing.assert_allclose(got["c"], want["c"], rtol=1e-3,
                               atol=1e-3 * float(np.abs(want["c"]).max()))


def test_latency_profiles_are_chosen_per_batch(conv):  # item 6
    from quantkit.backends.trt import ShapeNeeds

    path, _, root, _ = conv
    s = EngineSettings(**SMALL, latency_profiles=True)
    needs = ShapeNeeds(kind="image", batch_sizes=(1, 8), latency_batch_sizes=(1, 8))
    art = build_engine(path, s, cache_dir=root / "engines", needs=needs)
    assert len(art.meta.settings["extra_profiles"]) == 2
    x = np.random.default_rng(3).normal(0, 1, (8, 16, 8, 8)).astype(np.float32)
    with TrtRunner(art.engine_path) as r, OrtRunner(str(path)) as o:
        for batch, profile in ((1, 1), (8, 2), (3, 0)):
            got = r.infer({"x": x[:batch]})["y"]
            assert r._profile == profile
            want = o.infer({"x": x[:batch]})["y"]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


def _layernorm_fp16_artifact(tmp_path, *, qdq_scale_dtype="fp32"):
    """x -> LayerNorm(eps 1e-12) -> MatMul -> Add, INT8 MatMul + FP16 remainder, as a run
    builds it: the LayerNorm rule keeps the normalization FP32 (issue 17 item 12)."""
    from quantkit.precision.plan import build_plan
    from quantkit.qdq.casts import convert_fp16
    from quantkit.qdq.insert import insert_qdq

    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln",
                          epsilon=1e-12, axis=-1),
         helper.make_node("MatMul", ["h", "W"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["y"], name="bias")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [numpy_helper.from_array(np.ones(64, np.float32), "gamma"),
         numpy_helper.from_array(np.zeros(64, np.float32), "beta"),
         numpy_helper.from_array(rng.normal(size=(64, 16)).astype(np.float32), "W"),
         numpy_helper.from_array(np.full(16, 0.5, np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    plan = build_plan(m, amax={"h": 4.0}, remainder="fp16")
    assert plan.decisions["ln"].precision.value == "fp32"  # the rule, before any engine
    edited, _ = insert_qdq(m, plan)
    path = tmp_path / f"ln_{qdq_scale_dtype}.onnx"
    onnx.save(convert_fp16(edited, plan, qdq_scale_dtype=qdq_scale_dtype), str(path))
    return path


def test_layernorm_stays_fp32_in_the_engine(gpu, tmp_path):  # item 12
    path = _layernorm_fp16_artifact(tmp_path)
    art = build_engine(path, EngineSettings(**SMALL), cache_dir=tmp_path / "engines")
    layers = parse_layer_info(art.layers_path.read_text())
    norm = [layer for layer in layers if "ln" in str(layer.get("name", ""))]
    assert norm and all("Half" not in str(layer.get("outputs", "")) for layer in norm), norm


def test_fp16_scale_artifact_builds_with_int8_matmul(gpu, tmp_path):  # item 14
    path = _layernorm_fp16_artifact(tmp_path, qdq_scale_dtype="fp16")
    art = build_engine(path, EngineSettings(**SMALL), cache_dir=tmp_path / "engines")
    check = check_int8_layers(parse_layer_info(art.layers_path.read_text()), ["mm"])
    assert check["nodes"]["mm"]["status"] == "int8", check
