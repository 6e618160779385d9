"""Model/data fit checks run before any inference (real graphs, a real ORT session)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from quantkit.errors import ConfigError, DataError, ModelError
from quantkit.models.fit import (check_class_count, check_custom_ops, check_fixed_batch,
                                 fixed_batch,
                                 input_specs)


def _image_model(batch="N", classes=4, custom=False) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3 * 8 * 8, classes],
                           np.random.default_rng(0).normal(size=(192, classes)).astype(np.float32).ravel())
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 192])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "w"], ["mm"], name="head")]
    if custom:
        nodes.append(helper.make_node("FancyAct", ["mm"], ["logits"], name="fancy", domain="acme.ops"))
    else:
        nodes.append(helper.make_node("Identity", ["mm"], ["logits"], name="out"))
    g = helper.make_graph(nodes, "img", [x], [y], [w, shape])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("acme.ops", 1)] if custom else [])
    return helper.make_model(g, opset_imports=opsets)


def _text_model() -> onnx.ModelProto:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "T"])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])
    emb = helper.make_tensor("emb", TensorProto.FLOAT, [10, 2], np.ones(20, np.float32))
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"], name="embed"),
             helper.make_node("ReduceMean", ["e"], ["logits"], name="pool", axes=[1], keepdims=0)]
    return helper.make_model(helper.make_graph(nodes, "txt", [ids], [y], [emb]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_custom_domain_named_by_node_where_ort_fails():
    m = _image_model(custom=True)
    onnx.checker.check_model(m)  # the checker accepts it ...
    with pytest.raises(Exception):  # ... ONNX Runtime cannot open it
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError) as e:
        check_custom_ops(m)
    msg = str(e.value)
    assert "node fancy" in msg and "acme.ops::FancyAct" in msg and "Fix:" in msg
    assert "\n" not in msg
    check_custom_ops(m, allowed_domains=["acme.ops"])
    check_custom_ops(_image_model())


def test_class_count_mismatch_before_inference():
    m = _image_model(classes=4)
    with pytest.raises(DataError) as e:
        check_class_count(m, "logits", 5)
    assert "'model_classes': 4" in str(e.value) and "'data_classes': 5" in str(e.value)
    assert "exactly 4 classes" in e.value.fix and "data.label_column=null" in e.value.fix
    check_class_count(m, "logits", 4)
    check_class_count(_image_model(classes=4), "missing", 5)  # unknown output: nothing to say


def test_a_fixed_batch_above_one_names_the_settings_to_change():
    specs = input_specs(_image_model(batch=4))
    with pytest.raises(ConfigError) as e:
        check_fixed_batch(specs, {"data.batch_size": 64, "backend.batch_size": 4,
                                  "bench.batch_sizes": [1, 32]})
    msg = str(e.value)
    assert "data.batch_size=4" in msg and "bench.batch_sizes=[4]" in msg
    assert "backend.batch_size=4 " not in msg  # already right: not listed
    check_fixed_batch(specs, {"data.batch_size": 4, "bench.batch_sizes": [4]})
    check_fixed_batch(input_specs(_image_model()), {"data.batch_size": 64})
    # the settings the fix names really make the model run
    sess = ort.InferenceSession(_image_model(batch=4).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    assert sess.run(None, {"x": np.zeros((4, 3, 8, 8), np.float32)})[0].shape == (4, 4)
    with pytest.raises(Exception):
        sess.run(None, {"x": np.zeros((2, 3, 8, 8), np.float32)})


def test_a_fixed_batch_of_one_needs_no_setting():
    """Detectors are often exported with a fixed batch of 1: the run feeds one example at a
    time (Feeds.fixed_batch), so no batch setting has to change."""
    specs = input_specs(_image_model(batch=1))
    assert fixed_batch(specs) == 1 and fixed_batch(input_specs(_image_model())) is None
    check_fixed_batch(specs, {"data.batch_size": 64, "bench.batch_sizes": [1, 32]})
