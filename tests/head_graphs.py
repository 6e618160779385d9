"""Detector-like graphs built in code for the Concat rule (issue 46): a head that concatenates
box coordinates in pixels with Sigmoid class scores, and a feature Concat of two convs whose
ranges differ by a chosen factor, plus the naive single Q/DQ after a tensor that
quantize-everything tools write. Importable from every test folder (tests/ is on sys.path,
tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.graph.grids import INT8_MAX

OPSET = 17
F = TensorProto.FLOAT


def _model(nodes, x_shape, out_name, out_shape, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info(out_name, F, out_shape)],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def detector_head(seed: int = 0, *, c_in: int = 16, classes: int = 6, hw: int = 8,
                  image_px: float = 640.0) -> onnx.ModelProto:
    """x [N, c_in, hw, hw] -> ``box_conv`` -> x16 + the cell centres of an ``image_px`` image
    -> ``boxes`` [N, 4, hw, hw] (cx, cy, w, h in pixels, up to ~700); x -> ``cls_conv`` (bias
    -2) -> Sigmoid -> ``scores`` [N, classes, hw, hw] (0..1, mostly small); Concat
    ``head_concat`` (axis 1) -> ``head_cat`` -> Reshape -> output ``head`` [N, 4 + classes,
    hw * hw] (YOLOv8's export layout)."""
    rng = np.random.default_rng(seed)
    centre = (np.arange(hw, dtype=np.float32) + 0.5) * image_px / hw
    grid = np.zeros((1, 4, hw, hw), np.float32)
    grid[0, 0] = centre[None, :]   # cx along width
    grid[0, 1] = centre[:, None]   # cy along height
    grid[0, 2:] = image_px / hw    # w, h around one cell
    inits = {
        "Wb": (rng.standard_normal((4, c_in, 1, 1)) / np.sqrt(c_in)).astype(np.float32),
        "bb": np.zeros(4, np.float32),
        "stride": np.array(16.0, np.float32),
        "grid": grid,
        "Wc": (rng.standard_normal((classes, c_in, 1, 1)) / np.sqrt(c_in)).astype(np.float32),
        "bc": np.full(classes, -2.0, np.float32),
        "shape": np.array([0, 4 + classes, -1], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "Wb", "bb"], ["box_raw"], name="box_conv"),
        helper.make_node("Mul", ["box_raw", "stride"], ["box_px"], name="box_stride"),
        helper.make_node("Add", ["box_px", "grid"], ["boxes"], name="box_grid"),
        helper.make_node("Conv", ["x", "Wc", "bc"], ["cls_logits"], name="cls_conv"),
        helper.make_node("Sigmoid", ["cls_logits"], ["scores"], name="cls_sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["head_cat"], name="head_concat", axis=1),
        helper.make_node("Reshape", ["head_cat", "shape"], ["head"], name="head_reshape"),
    ]
    return _model(nodes, ["N", c_in, hw, hw], "head", ["N", 4 + classes, hw * hw], inits)


def concat_conv(seed: int = 0, *, wide: float = 500.0, c: int = 16, hw: int = 8,
                output: str = "y") -> onnx.ModelProto:
    """A feature Concat whose inputs' ranges differ ~``wide`` x: x [N, c, hw, hw] -> ``conv_a``
    -> ``a`` (amax ~3); x -> ``conv_b`` -> x``wide`` -> ``b_wide``; Concat ``feat_concat``
    (axis 1) -> ``feat`` -> ``conv_c`` (2c -> c) -> output ``output``."""
    rng = np.random.default_rng(seed)

    def w(o, i):
        return (rng.standard_normal((o, i, 1, 1)) / np.sqrt(i)).astype(np.float32)

    inits = {"Wa": w(c, c), "Wb": w(c, c), "k": np.array(wide, np.float32), "Wc": w(c, 2 * c)}
    nodes = [
        helper.make_node("Conv", ["x", "Wa"], ["a"], name="conv_a"),
        helper.make_node("Conv", ["x", "Wb"], ["b"], name="conv_b"),
        helper.make_node("Mul", ["b", "k"], ["b_wide"], name="widen"),
        helper.make_node("Concat", ["a", "b_wide"], ["feat"], name="feat_concat", axis=1),
        helper.make_node("Conv", ["feat", "Wc"], [output], name="conv_c"),
    ]
    return _model(nodes, ["N", c, hw, hw], output, ["N", c, hw, hw], inits)


def qdq_after(model: onnx.ModelProto, tensor: str, amax: float) -> onnx.ModelProto:
    """A copy of ``model`` with one INT8 QuantizeLinear -> DequantizeLinear (scale
    ``amax / 127``) between ``tensor`` and all its readers: what a tool that quantizes every
    tensor writes after a Concat."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    dq_out = f"{tensor}__naive_dq"
    for node in g.node:
        for i, t in enumerate(node.input):
            if t == tensor:
                node.input[i] = dq_out
    g.initializer.extend([
        numpy_helper.from_array(np.array(amax / INT8_MAX, np.float32), f"{tensor}__naive_scale"),
        numpy_helper.from_array(np.array(0, np.int8), f"{tensor}__naive_zp")])
    producer = next(i for i, n in enumerate(g.node) if tensor in n.output)
    q = helper.make_node("QuantizeLinear", [tensor, f"{tensor}__naive_scale",
                                            f"{tensor}__naive_zp"], [f"{tensor}__naive_q"],
                         name=f"{tensor}__naive_QuantizeLinear")
    dq = helper.make_node("DequantizeLinear", [f"{tensor}__naive_q", f"{tensor}__naive_scale",
                                               f"{tensor}__naive_zp"], [dq_out],
                          name=f"{tensor}__naive_DequantizeLinear")
    nodes = list(g.node)
    nodes[producer + 1:producer + 1] = [q, dq]
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(out, full_check=True)
    return out
