"""A tiny, real embedding model built in code (no head): token states and a pooled output.

``input_ids, attention_mask -> Gather -> MatMul -> Relu -> MatMul = token_states [B, T, 16]``
and ``sentence [B, 16]`` = the attention-masked mean of ``token_states``. Input names can be
changed (``input_names``) to test ``model.inputs.*``; ``with_logits`` adds a 2-class head
output ``logits`` after the pooled output (a multi-output model).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyworld import DIM, NEG_WORDS, POS_WORDS, VOCAB


def embedding_model(*, input_names=("input_ids", "attention_mask"), seed: int = 0,
                    with_logits: bool = False, token_type_ids: str | None = None
                    ) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    emb = rng.normal(0, 0.5, (len(VOCAB), DIM)).astype(np.float32)
    for w in POS_WORDS:
        emb[VOCAB.index(w), 0] += 2.0
    for w in NEG_WORDS:
        emb[VOCAB.index(w), 1] += 2.0
    w1 = (np.eye(DIM) + rng.normal(0, 0.3, (DIM, DIM))).astype(np.float32)
    w2 = (np.eye(DIM) + rng.normal(0, 0.3, (DIM, DIM))).astype(np.float32)
    ids, mask = input_names
    inits = [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes_last"),
             numpy_helper.from_array(np.array([1], np.int64), "axes_seq"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    nodes = [helper.make_node("Gather", ["emb", ids], ["tok"], name="embed"),
             helper.make_node("MatMul", ["tok", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("MatMul", ["hr", "w2"], ["token_states"], name="fc2"),
             helper.make_node("Cast", [mask], ["maskf"], to=TensorProto.FLOAT, name="mask_cast"),
             helper.make_node("Unsqueeze", ["maskf", "axes_last"], ["mask3"], name="mask_unsq"),
             helper.make_node("Mul", ["token_states", "mask3"], ["masked"], name="mask_mul"),
             helper.make_node("ReduceSum", ["masked", "axes_seq"], ["summed"], keepdims=0,
                              name="sum"),
             helper.make_node("ReduceSum", ["mask3", "axes_seq"], ["count"], keepdims=0,
                              name="count"),
             helper.make_node("Add", ["count", "eps"], ["count_eps"], name="count_eps"),
             helper.make_node("Div", ["summed", "count_eps"], ["sentence"], name="mean")]
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "seq"])]
    if token_type_ids:  # an input the model reads (added to the ids' embedding, times 0)
        inits.append(numpy_helper.from_array(np.zeros((2, DIM), np.float32), "type_emb"))
        nodes[0:1] = [helper.make_node("Gather", ["emb", ids], ["tok0"], name="embed"),
                      helper.make_node("Gather", ["type_emb", token_type_ids], ["typ"],
                                       name="embed_types"),
                      helper.make_node("Add", ["tok0", "typ"], ["tok"], name="embed_sum")]
        inputs.append(helper.make_tensor_value_info(token_type_ids, TensorProto.INT64,
                                                    ["batch", "seq"]))
    outputs = [helper.make_tensor_value_info("token_states", TensorProto.FLOAT,
                                             ["batch", "seq", DIM]),
               helper.make_tensor_value_info("sentence", TensorProto.FLOAT, ["batch", DIM])]
    if with_logits:
        w3 = np.zeros((DIM, 2), np.float32)
        w3[0, 1], w3[1, 0] = 3.0, 3.0
        inits.append(numpy_helper.from_array(w3, "w3"))
        nodes.append(helper.make_node("MatMul", ["sentence", "w3"], ["logits"], name="head"))
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2]))
    graph = helper.make_graph(nodes, "tiny_embed", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="quantkit-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
