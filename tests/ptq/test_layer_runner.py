"""One node run on its own: the node's output, and only the constants that node reads."""

from __future__ import annotations

import numpy as np
from onnx import helper

from ptq_graphs import F, init, make_model
from quantkit.ptq.layer_runner import LayerRunner


def test_a_layer_runner_holds_its_node_s_constants_only():
    """The runner's graph is the node, its fed inputs and the constants it reads (copied from
    the model; no other constant is in it), and it computes the node."""
    rng = np.random.default_rng(0)
    w1, b = rng.standard_normal((8, 4)).astype(np.float32), np.ones(4, np.float32)
    big = rng.standard_normal((4, 256)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
                        helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
                        helper.make_node("MatMul", ["hb", "big_w"], ["y"], name="mm2")],
                       [helper.make_tensor_value_info("x", F, ["B", 8])],
                       [helper.make_tensor_value_info("y", F, ["B", 256])],
                       [init("w1", w1), init("b", b), init("big_w", big)])
    add = model.graph.node[1]
    x = rng.standard_normal((3, 4)).astype(np.float32)
    with LayerRunner(model, add, ["h"], {"h": 2}) as r:
        assert [t.name for t in r.model.graph.initializer] == ["b"]
        assert np.array_equal(r.run({"h": x}), x + b)
    mm1 = model.graph.node[0]
    with LayerRunner(model, mm1, ["x", "w1"], {"x": 2, "w1": 2}) as r:
        assert len(r.model.graph.initializer) == 0  # its weight is fed per call
        xi = rng.standard_normal((3, 8)).astype(np.float32)
        assert np.allclose(r.run({"x": xi, "w1": w1}), xi @ w1, rtol=1e-6, atol=1e-6)
