"""Shape inference on a weightless skeleton (graph.facts.shape_skeleton) names exactly what
inference on the whole model names: on the real MiniLM export and on a graph whose shapes
depend on constant values (Reshape's int64 shape, Resize's float scales)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from quantkit.graph.facts import shape_skeleton, tensor_infos, with_value_info
from qdq_graphs import init, make_model


def _full_infos(model: onnx.ModelProto) -> dict:
    """tensor_infos' reading of ONNX shape inference run on the whole model."""
    g = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True).graph
    out = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        out[vi.name] = (tt.elem_type, tuple(d.dim_value if d.HasField("dim_value") else None
                                            for d in tt.shape.dim))
    for t in g.initializer:
        out[t.name] = (t.data_type, tuple(t.dims))
    return out


def _infos(model: onnx.ModelProto) -> dict:
    return {k: (v.elem_type, v.shape) for k, v in tensor_infos(model).items()}


def _value_dependent_graph() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Reshape", ["y", "shape"], ["r"], name="reshape"),
        helper.make_node("Resize", ["r", "", "scales"], ["z"], name="resize", mode="nearest"),
        helper.make_node("Relu", ["z"], ["out"], name="relu"),
    ]
    inits = [init("w", rng.standard_normal((8, 64)).astype(np.float32)),
             init("shape", np.array([2, 4, 4, 4], dtype=np.int64)),
             init("scales", np.array([1.0, 1.0, 2.0, 3.0], dtype=np.float32))]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                      [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["a", "b", "c", "d"])],
                      inits)


def test_skeleton_drops_weight_values_and_keeps_shape_constants():
    sk = shape_skeleton(_value_dependent_graph())
    by_name = {t.name: t for t in sk.graph.initializer}
    assert not by_name["w"].raw_data and not by_name["w"].float_data  # 512 floats: dropped
    assert list(by_name["w"].dims) == [8, 64]
    assert by_name["shape"].raw_data or by_name["shape"].int64_data  # int64: kept
    assert by_name["scales"].raw_data or by_name["scales"].float_data  # 4 elements: kept


def test_value_dependent_shapes_are_inferred_as_on_the_whole_model():
    model = _value_dependent_graph()
    infos = _infos(model)
    assert infos == _full_infos(model)
    assert infos["z"] == (TensorProto.FLOAT, (2, 4, 8, 12))
    full = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    assert with_value_info(model).SerializeToString() == full.SerializeToString()


def test_real_encoder_infos_and_value_info_match_whole_model_inference(minilm_model):
    model = onnx.load(minilm_model)
    assert _infos(model) == _full_infos(model)
    full = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    annotated = with_value_info(model)
    assert annotated.SerializeToString() == full.SerializeToString()
    assert len(annotated.graph.value_info) > 100  # inference did annotate the graph


def _rejects(check, model) -> str | None:
    try:
        check(model)
    except onnx.checker.ValidationError as exc:
        return str(exc).splitlines()[0]
    return None


def test_check_structure_rejects_what_the_checker_rejects(minilm_model):
    """graph.facts.check_structure (the checker on a weightless copy, weights as typed
    inputs) passes the real encoder and its Q/DQ graph and rejects, with the checker's own
    message, an unknown op, a tensor written twice and a node reading nothing defined."""
    from quantkit.graph.facts import check_structure

    model = onnx.load(minilm_model)
    before = model.SerializeToString()
    check_structure(model)
    assert model.SerializeToString() == before  # the model itself is not edited
    breaks = {
        "unknown op": lambda g: setattr(g.node[5], "op_type", "NoSuchOp"),
        "written twice": lambda g: g.node[5].output.__setitem__(0, g.node[3].output[0]),
        "undefined input": lambda g: next(n for n in g.node[5:] if n.op_type == "MatMul"
                                          ).input.__setitem__(0, "nowhere"),
    }
    for what, edit in breaks.items():
        bad = onnx.ModelProto()
        bad.CopyFrom(model)
        edit(bad.graph)
        full = _rejects(onnx.checker.check_model, bad)
        assert full is not None, what
        assert _rejects(check_structure, bad) == full, what
