"""The latency stage on real ONNX Runtime sessions over tiny graphs built here, the timing
loop's stopping rules, and the bench settings (composed with Hydra, validated)."""

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import quantkit
from quantkit.bench import measure_latency, time_runner
from quantkit.bench.timing import warmup_calls
from quantkit.errors import ConfigError


def compose_settings(*overrides: str):
    return quantkit.configure(["experiment=bert_int8", *overrides])


def matmul_chain(depth: int, width: int = 64) -> onnx.ModelProto:
    """x [batch, width] -> ``depth`` MatMul+Relu layers -> y [batch, width]: deeper = slower."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        w = numpy_helper.from_array((rng.standard_normal((width, width)) * 0.1).astype(np.float32),
                                    f"w{i}")
        inits.append(w)
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    return model


def make_feeds(batch):
    rng = np.random.default_rng(batch)
    for _ in range(3):
        yield {"x": rng.standard_normal((batch, 64)).astype(np.float32)}


# ------------------------------------------------------------------------------ timing loop

class StepClock:
    """A clock that advances ``step_ns`` on every reading (stopping rules without wall time)."""

    def __init__(self, step_ns: int) -> None:
        self.t, self.step = 0, step_ns

    def __call__(self) -> int:
        self.t += self.step
        return self.t


def test_warmup_untimed_then_stops_at_repeat_cap():
    calls = []
    t = time_runner(calls.append, [{"a": 1}, {"a": 2}], warmup=3, min_repeats=2, max_repeats=10,
                    max_seconds=1e9, clock=StepClock(1_000_000))
    assert len(calls) == 13 and t.n == 10 and t.stopped == "repeats"
    # feeds are cycled; the timed runs restart at the first feed (timings pair by position)
    assert [c["a"] for c in calls] == [1, 2, 1] + [1, 2] * 5
    assert np.allclose(t.latencies_ms, 1.0)  # one clock step between the readings of a call


def test_warmup_sees_every_feed_shape_before_timing():
    """2 warm-up calls for 4 feed shapes left 2 shapes cold for the first timed calls."""
    calls = []
    feeds = [{"x": np.zeros((b, 8), np.float32)} for b in (1, 4, 16, 32)]
    t = time_runner(calls.append, feeds, warmup=2, min_repeats=4, max_repeats=4,
                    max_seconds=1e9, clock=StepClock(1_000_000))
    warm = [c["x"].shape[0] for c in calls[:t.warmup]]
    assert t.warmup == 4 and sorted(warm) == [1, 4, 16, 32]
    assert [c["x"].shape[0] for c in calls[t.warmup:]] == [1, 4, 16, 32]
    assert warmup_calls(0, 4) == 0 and warmup_calls(10, 4) == 10


def test_time_budget_stops_after_min_repeats():
    calls = []
    t = time_runner(calls.append, [{}], warmup=0, min_repeats=4, max_repeats=1000,
                    max_seconds=0.0, clock=StepClock(1_000_000))
    assert t.n == 4 and t.stopped == "time budget" and len(calls) == 4
    t = time_runner(calls.append, [{}], warmup=0, min_repeats=1, max_repeats=1000,
                    max_seconds=0.01, clock=StepClock(1_000_000))  # 2 ms per timed call
    assert 4 <= t.n <= 6 and t.stopped == "time budget"


def test_time_budget_stops_at_a_whole_cycle_of_feeds():
    calls = []
    t = time_runner(calls.append, [{"a": 1}, {"a": 2}, {"a": 3}], warmup=0, min_repeats=4,
                    max_repeats=1000, max_seconds=0.0, clock=StepClock(1_000_000))
    assert t.n == 6 and [c["a"] for c in calls] == [1, 2, 3, 1, 2, 3]
    t = time_runner(calls.append, [{}, {}, {}], warmup=0, min_repeats=1, max_repeats=5,
                    max_seconds=0.0, clock=StepClock(1_000_000))
    assert t.n == 3  # one whole cycle once the budget is spent


def test_timing_arguments_checked():
    with pytest.raises(ValueError):
        time_runner(lambda f: None, [], warmup=0, min_repeats=1, max_repeats=1, max_seconds=1)
    with pytest.raises(ValueError):
        time_runner(lambda f: None, [{}], warmup=0, min_repeats=5, max_repeats=2, max_seconds=1)


# ------------------------------------------------------------------------------ stage

@pytest.fixture(scope="module")
def result(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    paths = {}
    for name, depth in (("fp32", 8), ("fp16", 8), ("int8.minmax", 2), ("int8.slow", 24)):
        paths[name] = str(d / f"{name}.onnx")
        onnx.save(matmul_chain(depth), paths[name])
    s = compose_settings("bench.batch_sizes=[1,16]", "bench.min_repeats=30", "bench.repeats=60",
                         "bench.max_seconds=0.2", "bench.warmup=2", "bench.n_boot=300",
                         "bench.target_qps=5000", "bench.p99_budget_ms=1000")
    return measure_latency(s, paths, make_feeds)


def test_every_candidate_and_batch_timed(result):
    json.dumps(result)  # JSON-able as it goes into the record
    assert set(result["candidates"]) == {"fp32", "fp16", "int8.minmax", "int8.slow"}
    for per_batch in result["candidates"].values():
        assert set(per_batch) == {"1", "16"}
        for b, s in per_batch.items():
            assert s["batch_size"] == int(b) and 30 <= s["n"] <= 60
            assert s["warmup"] == 3  # bench.warmup=2, but every one of the 3 feeds once
            assert 0 < s["p50_ms"] <= s["p90_ms"] <= s["p99_ms"]
            assert s["throughput"] > 0 and s["feeds"] == 3
    summary = result["summary"]
    assert summary["inputs"] == {"1": [{"x": [1, 64]}] * 3, "16": [{"x": [16, 64]}] * 3}
    assert summary["measured"] == ["fp32", "fp16", "int8.minmax", "int8.slow"]


def test_summary_says_cpu_numbers_are_no_tensorrt_prediction(result):
    s = result["summary"]
    assert s["backend"] == "ort" and s["device"] == "CPU"
    assert s["providers"] == ["CPUExecutionProvider"] and s["target"] == "tensorrt"
    assert "NOT a prediction of TensorRT" in s["caveat"] and s["host"]["cpu"]


def test_int8_compared_with_fp16(result):
    slow = result["candidates"]["int8.slow"]["16"]["vs_fp16"]
    # 24 layers vs 8: far slower at batch 16 whatever the machine's load
    assert slow["int8_not_faster"] is True and slow["median_ratio_vs_fp16"] > 1
    assert "vs_fp16" in result["candidates"]["int8.minmax"]["16"]
    assert "vs_fp16" not in result["candidates"]["fp32"]["16"]
    flagged = {(f["candidate"], f["batch_size"]) for f in result["summary"]["int8_not_faster"]}
    assert ("int8.slow", 16) in flagged


def test_cost_projection_against_fp32(result):
    cost = result["summary"]["cost"]
    assert cost["target_qps"] == 5000 and cost["p99_budget_ms"] == 1000
    per = cost["per_candidate"]
    assert per["fp32"]["saving_vs_fp32"] == 0.0
    for name, c in per.items():
        assert c["fits_budget"] is True and c["batch_size"] == 16  # generous budget: largest
        s = result["candidates"][name]["16"]
        assert c["instances"] == math.ceil(5000 / s["throughput"])
        if name != "fp32":
            assert c["instances_saved_vs_fp32"] == per["fp32"]["instances"] - c["instances"]


def test_candidate_selection_and_unknown_names(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(matmul_chain(1), str(path))
    s = compose_settings("bench.batch_sizes=[2]", "bench.min_repeats=2", "bench.repeats=3",
                         "bench.max_seconds=0", "bench.n_boot=50", "bench.candidates=[fp32,mixed]")
    res = measure_latency(s, {"fp32": str(path), "int8.mse": str(path)}, make_feeds)
    assert set(res["candidates"]) == {"fp32"}
    assert res["summary"]["skipped"] == {"mixed": "not among this run's candidates"}
    assert res["summary"]["int8_not_faster"] == []  # no fp16 measured: nothing to compare


def test_batch_without_full_feeds_is_skipped(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(matmul_chain(1), str(path))
    s = compose_settings("bench.batch_sizes=[1,8]", "bench.min_repeats=2", "bench.repeats=3",
                         "bench.max_seconds=0", "bench.n_boot=50")

    def short_split(batch):  # only 5 examples: no full batch of 8
        yield {"x": np.zeros((min(batch, 5), 64), np.float32)}

    res = measure_latency(s, {"fp32": str(path)}, short_split)
    assert set(res["candidates"]["fp32"]) == {"1"}
    assert "8" in res["summary"]["skipped_batches"]


# ------------------------------------------------------------------------------ settings

def test_default_bench_settings_are_small():
    b = compose_settings().bench
    assert b.enabled and b.batch_sizes == [1, 32] and b.max_seconds <= 3 and b.repeats <= 500
    assert b.candidates == []


@pytest.mark.parametrize("override,key", [
    ("bench.batch_sizes=[]", "bench.batch_sizes"), ("bench.batch_sizes=[1,0]", "bench.batch_sizes[1]"),
    ("bench.batch_sizes=[4,4]", "bench.batch_sizes"), ("bench.repeats=2", "bench.repeats"),
    ("bench.level=1.5", "bench.level"), ("bench.target_qps=0", "bench.target_qps"),
    ("bench.p99_budget_ms=-1", "bench.p99_budget_ms"), ("bench.min_repeats=0", "bench.min_repeats")])
def test_bad_bench_settings_one_line_error(override, key):
    with pytest.raises(ConfigError) as e:
        compose_settings(override)
    assert key in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------ reuse

def test_latency_reused_from_the_stage_cache_for_the_same_artifact(tmp_path):
    """The run's reuse hook: a second measurement of the same artifact, feeds, host and
    settings comes from the stage cache (marked reused, same numbers); another artifact or
    bench.remeasure=true times afresh."""
    from quantkit.cache import StageCache
    from quantkit.run.context import RunContext
    from quantkit.run.stages.latency import latency_reuse

    cache = StageCache(tmp_path / "stages")  # quantkit's own cache, passed in the run context

    def hook(settings, shas):
        ctx = RunContext(settings=settings, run_dir=tmp_path, cache_dir=tmp_path, cache=cache)
        return latency_reuse(ctx, shas)

    path = tmp_path / "m.onnx"
    onnx.save(matmul_chain(2), str(path))
    s = compose_settings("bench.batch_sizes=[1,4]", "bench.min_repeats=3", "bench.repeats=5",
                         "bench.max_seconds=0", "bench.n_boot=50")
    shas = {"fp32": "a" * 64, "int8.mse": "b" * 64}
    first = measure_latency(s, {"fp32": str(path)}, make_feeds, reuse=hook(s, shas))
    again = measure_latency(s, {"fp32": str(path), "int8.mse": str(path)}, make_feeds,
                            reuse=hook(s, shas))
    f, a = first["candidates"]["fp32"], again["candidates"]["fp32"]
    assert all(not st["reused"] for st in f.values())
    assert all(st["reused"] for st in a.values())
    assert a["1"]["p50_ms"] == f["1"]["p50_ms"] and a["1"]["measured_at"] == f["1"]["measured_at"]
    assert all(not st["reused"] for st in again["candidates"]["int8.mse"].values())
    fresh_s = compose_settings("bench.batch_sizes=[1,4]", "bench.min_repeats=3", "bench.repeats=5",
                               "bench.max_seconds=0", "bench.n_boot=50", "bench.remeasure=true")
    fresh = measure_latency(fresh_s, {"fp32": str(path)}, make_feeds,
                            reuse=hook(fresh_s, shas))
    assert all(not st["reused"] for st in fresh["candidates"]["fp32"].values())


def test_recommended_slower_than_fp32_is_flagged():
    from report.builders import candidate, latency

    from quantkit.record.candidate import CandidateRecord
    from quantkit.record.serde import decode
    from quantkit.run.stages.record import slower_than_fp32

    def lat(b1, b32):
        return {"1": latency(10.0, throughput=b1), "32": latency(100.0, batch=32, throughput=b32)}

    entries = {"fp32": candidate(latency=lat(100.0, 300.0)),
               "mixed": candidate(latency=lat(120.0, 200.0)),
               "int8.mse": candidate(latency=lat(200.0, 600.0)), "fp16": candidate()}
    cands = {n: decode(CandidateRecord, c, where=n) for n, c in entries.items()}
    msg = slower_than_fp32(cands, "mixed")
    assert msg and "batch 32: 200.0/s vs FP32 300.0/s" in msg and "batch 1" not in msg
    assert slower_than_fp32(cands, "int8.mse") is None
    assert slower_than_fp32(cands, "fp16") is None  # not measured: nothing to say
    assert slower_than_fp32(cands, None) is None
