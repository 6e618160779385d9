"""OrtRunner's extra outputs: appended to the serialized model, no copy, no shape inference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from quantkit.backends.ort import OrtRunner, outputs_suffix
from quantkit.graph.model_graph import ModelGraph
from test_memory import two_layer_model


def test_the_suffix_parses_as_the_model_with_the_outputs_added():
    m = two_layer_model()
    merged = onnx.ModelProto()
    merged.ParseFromString(m.SerializeToString()
                           + outputs_suffix(m, ["h", "y", "r", "h"], {"h": TensorProto.FLOAT}))
    assert [o.name for o in merged.graph.output] == ["y", "h", "r"]  # y was one already
    assert merged.graph.output[1].type.tensor_type.elem_type == TensorProto.FLOAT
    assert not merged.graph.output[2].type.HasField("tensor_type")  # untyped: ORT infers it
    del merged.graph.output[1:]
    assert merged == m  # nothing else changed: name, initializers, opset


def test_extra_outputs_come_back_typed_or_not():
    m = two_layer_model()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    with OrtRunner(m) as plain:
        y = plain.infer({"x": x})["y"]
    graph = ModelGraph.build(m)
    for types in (None, graph.output_types(["h", "r"])):
        with OrtRunner(m, extra_outputs=["h", "r"], output_types=types) as r:
            out = r.infer({"x": x})
        np.testing.assert_array_equal(out["y"], y)
        np.testing.assert_allclose(out["r"], np.maximum(out["h"], 0.0))
        assert out["h"].shape == (3, 16)
