"""backends/memory.py and OrtRunner's memory options: less resident memory, same numbers."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.memory import release_free_heap
from quantkit.backends.ort import OrtRunner
from quantkit.backends.runners import ort_runner


def two_layer_model():
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 4)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def resident_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_free_heap_returns_fragmented_free_pages():
    """Every other 64 KiB block freed: glibc keeps those holes resident (they sit below
    live blocks) until malloc_trim gives their pages back."""
    blocks = [bytearray(1 << 16) for _ in range(4000)]  # 250 MiB of heap (below mmap size)
    del blocks[::2]  # 125 MiB of holes
    before = resident_mib()
    assert release_free_heap()
    assert before - resident_mib() > 60
    del blocks


def test_no_memory_arena_reaches_ort_and_keeps_the_numbers():
    m = two_layer_model()
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    with OrtRunner(m, extra_outputs=["h", "r"]) as pooled, \
            OrtRunner(m, extra_outputs=["h", "r"], memory_arena=False) as direct:
        assert pooled.session_.get_session_options().enable_cpu_mem_arena
        assert not direct.session_.get_session_options().enable_cpu_mem_arena
        a, b = pooled.infer({"x": x}), direct.infer({"x": x})
    assert set(a) == set(b) == {"y", "h", "r"}
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_ort_runner_passes_memory_arena():
    with ort_runner(None, two_layer_model(), name="t", memory_arena=False) as r:
        assert not r.session_.get_session_options().enable_cpu_mem_arena
        assert r.output_names == ["y"]
    assert r.session_ is None  # closed: the session was dropped on exit
