"""RunContext: explicit per-run state (stage cache, feeds, runners), nothing module-level."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from onnx import numpy_helper

import quantkit.environment as environment

from quantkit.cache import StageCache
from quantkit.run.context import RunContext


def test_cached_without_a_cache_computes_every_time(ctx):
    calls = []
    bare = dataclasses.replace(ctx, cache=None)
    for _ in range(2):
        obj, arrays, hit = bare.cached("x", {"a": 1}, lambda: (calls.append(1) or {"v": 2},
                                                               {"y": np.arange(3)}))
        assert obj == {"v": 2} and not hit and list(arrays["y"]) == [0, 1, 2]
    assert len(calls) == 2


def test_two_contexts_share_nothing_but_what_they_are_given(ctx, tmp_path):
    a = dataclasses.replace(ctx, cache=StageCache(tmp_path / "a"))
    b = dataclasses.replace(ctx, cache=StageCache(tmp_path / "b"))
    compute = lambda: ({"n": 1}, None)  # noqa: E731
    assert a.cached("x", {"k": 1}, compute)[2] is False
    assert a.cached("x", {"k": 1}, compute)[2] is True  # a's own cache
    assert b.cached("x", {"k": 1}, compute)[2] is False  # b never saw a's entry
    assert a.cache.stats() != b.cache.stats()


def test_measured_key_names_the_execution_environment(ctx):
    import onnxruntime

    env = ctx.measured_key()["environment"]
    assert env["onnxruntime"] == onnxruntime.__version__
    assert isinstance(env["cpu_isa"], list) and env["cpu"]


def test_float_computed_stages_are_keyed_by_numpys_blas_kernel(ctx, tmp_path, monkeypatch):
    """numpy's BLAS kernel changes GPTQ's and the statistics' rounding (OPENBLAS_CORETYPE=
    Haswell on an AVX-512 host built other bert_int8 weights): the calibration statistics,
    the FP16 range check, the ptq passes and the FP8 weight rounding are cached per kernel,
    like measured values."""
    from types import SimpleNamespace

    from quantkit.run.ranges import cached_stats
    from quantkit.run.fp16_range import check_fp16_range
    from quantkit.run.quant_source import ptq_memo

    c = dataclasses.replace(ctx, cache=StageCache(tmp_path / "cache"))
    assert c.measured_key()["environment"]["blas"] == environment.numpy_blas()
    calls = []

    def collect():
        calls.append("stats")
        return SimpleNamespace(stats={}, samples_seen=0, seconds=0.0)

    from quantkit.run.fp8_weights import rounding_key

    fp8_key = rounding_key(c, c.graph, ["n"])
    memo = ptq_memo(c)
    for _ in range(2):  # the second reads the cache
        cached_stats(c, c.graph, [], collect)
        check_fp16_range(c, c.graph)
        memo("ptq_channel_stats", {"k": 1}, lambda: (calls.append("ptq") or {"v": 1}, {}))
    assert calls == ["stats", "ptq"]
    monkeypatch.setattr(environment, "numpy_blas", lambda: "openblas 0.0 OtherCore")
    misses = c.cache.stats()
    cached_stats(c, c.graph, [], collect)
    check_fp16_range(c, c.graph)
    ptq_memo(c)("ptq_channel_stats", {"k": 1}, lambda: (calls.append("ptq") or {"v": 1}, {}))
    assert calls == ["stats", "ptq", "stats", "ptq"]  # another kernel: computed again
    assert rounding_key(c, c.graph, ["n"]) != fp8_key  # the FP8 GPTQ rounding too
    assert c.cache.stats() != misses


def test_numpy_blas_names_the_kernel_the_environment_forces():
    """Real processes: OPENBLAS_CORETYPE=Haswell makes numpy's OpenBLAS use its Haswell
    kernels on any x86 host that can run them; the name says so."""
    import subprocess
    import sys

    code = "from quantkit.environment import numpy_blas; print(numpy_blas())"
    here = environment.numpy_blas()
    if not here.startswith("openblas"):
        pytest.skip(f"numpy's BLAS here is {here!r}, not OpenBLAS")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    forced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**env, "OPENBLAS_CORETYPE": "Haswell"}, check=True).stdout
    assert forced.split()[0] == "openblas" and forced.split()[-1] == "Haswell", forced
    free = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True).stdout.split()
    assert free[:2] == forced.split()[:2] and free[-1]  # same library, its own choice


def test_runner_marks_fp32_tensors_from_the_graph(ctx):
    feed = next(iter(ctx.batches(ctx.head(ctx.splits.calib, 4), 4)))
    with ctx.runner(ctx.graph.model, name="t", extra_outputs=["h", "pooled"]) as r:
        out = r.infer(feed, ["h", "pooled", "logits"])
        assert "h" in r.output_names  # the Runner protocol: output_names, no isinstance
    assert out["h"].shape == (4, 16) and out["logits"].shape == (4, 2)
    w1 = numpy_helper.to_array(ctx.graph.constants["w1"])
    assert np.allclose(out["h"], out["pooled"] @ w1, atol=1e-5)  # fc1's real output came back


def test_make_context_respects_stage_cache_off(tiny, tmp_path):
    from runworld import settings_for
    from quantkit.run.context import make_context

    c = make_context(settings_for(tiny, "stage_cache=false"), tmp_path, tmp_path / "cache")
    assert isinstance(c, RunContext) and c.cache is not None and not c.cache.enabled


def test_runners_satisfy_the_protocol_without_a_session(ctx):
    from quantkit.backends.runner_protocol import Runner

    r = ctx.runner(ctx.graph.model, name="p")
    assert isinstance(r, Runner)  # output_names is declared; checked without opening a session
    assert not isinstance(object(), Runner)
