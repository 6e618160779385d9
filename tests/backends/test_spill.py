"""backends/spill.py: large graphs parked on disk between stages, read back unchanged."""

from __future__ import annotations

import gc

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import OrtRunner
from quantkit.backends.spill import KeptModel, LazySpilledModel, SpilledModel


def matmul_model(seed: int = 0):
    w = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_spilled_model_reads_back_the_same_graph_and_cleans_up():
    m = matmul_model()
    spilled = SpilledModel(m, name="mm")
    back = spilled()
    assert back is not m and back.SerializeToString() == m.SerializeToString()
    x = np.ones((2, 4), np.float32)
    with OrtRunner(m) as a, OrtRunner(spilled.path) as b:  # the file runs as the proto does
        np.testing.assert_array_equal(a.infer({"x": x})["y"], b.infer({"x": x})["y"])
    path = spilled.path
    del spilled
    gc.collect()
    assert not path.exists() and not path.parent.exists()


def test_lazy_spilled_model_builds_once_then_reads_the_file():
    built = []

    def build():
        built.append(1)
        return matmul_model(seed=len(built))

    lazy = LazySpilledModel(build, name="lazy")
    assert lazy.spilled_ is None and not built  # nothing before first use
    first = lazy()
    second, third = lazy(), lazy()
    assert built == [1]
    assert second is not first
    assert second.SerializeToString() == first.SerializeToString() == third.SerializeToString()


def test_kept_model_is_not_copied():
    m = matmul_model()
    assert KeptModel(m).load() is m
