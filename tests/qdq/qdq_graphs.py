"""Small real ONNX graphs built in code, plus a minimal max-abs range pass, for the qdq tests.

The range pass here is deliberately tiny (max-abs over a few real ORT runs) so these tests
do not depend on quantkit.calibrate.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner

OPSET = 17
F = TensorProto.FLOAT


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def weight(rng, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
    return (rng.standard_normal(shape) * s).astype(np.float32)


def matmul_model(seed: int = 0, k: int = 32, n: int = 48) -> onnx.ModelProto:
    """x[N, K] @ W[K, N] + b -> y  (weight per channel on axis 1)."""
    rng = _rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["y"], name="bias_add")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", k])],
                      [helper.make_tensor_value_info("y", F, ["N", n])],
                      [init("W", weight(rng, k, n)), init("b", weight(rng, n, scale=0.1))])


def mlp_model(seed: int = 0, d_in: int = 32, d_hidden: int = 64, d_out: int = 16) -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul -> Add -> Softmax (unnamed nodes)."""
    rng = _rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"]),
             helper.make_node("Add", ["h1", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]),
             helper.make_node("MatMul", ["h3", "W2"], ["h4"]),
             helper.make_node("Add", ["h4", "b2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", d_in])],
                      [helper.make_tensor_value_info("logits", F, ["N", d_out]),
                       helper.make_tensor_value_info("probs", F, ["N", d_out])],
                      [init("W1", weight(rng, d_in, d_hidden)), init("b1", weight(rng, d_hidden, scale=0.1)),
                       init("W2", weight(rng, d_hidden, d_out)), init("b2", weight(rng, d_out, scale=0.1))])


def gemm_model(seed: int = 0, k: int = 32, n: int = 24) -> onnx.ModelProto:
    """PyTorch Linear: Gemm(x, W[N, K], b, transB=1) (weight axis 0)."""
    rng = _rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="fc", transB=1)]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", k])],
                      [helper.make_tensor_value_info("y", F, ["N", n])],
                      [init("W", weight(rng, n, k)), init("b", weight(rng, n, scale=0.1))])


def conv_model(seed: int = 0, c_in: int = 16, c_out: int = 32) -> onnx.ModelProto:
    """Conv 3x3 (weight axis 0) -> Relu."""
    rng = _rng(seed)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", c_in, 8, 8])],
                      [helper.make_tensor_value_info("y", F, ["N", c_out, 8, 8])],
                      [init("W", weight(rng, c_out, c_in, 3, 3)), init("B", weight(rng, c_out, scale=0.1))])


def conv_transpose_model(seed: int = 0, c_in: int = 16, c_out: int = 24) -> onnx.ModelProto:
    """ConvTranspose stride 2 (weight [C_in, C_out, k, k], axis 1)."""
    rng = _rng(seed)
    nodes = [helper.make_node("ConvTranspose", ["x", "W", "B"], ["y"], name="deconv",
                              strides=[2, 2], kernel_shape=[2, 2])]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", c_in, 6, 6])],
                      [helper.make_tensor_value_info("y", F, ["N", c_out, 12, 12])],
                      [init("W", weight(rng, c_in, c_out, 2, 2)), init("B", weight(rng, c_out, scale=0.1))])


def residual_model(seed: int = 0, c: int = 16) -> onnx.ModelProto:
    """x -> Conv1 -> Relu -> r;  r -> Conv2 -> Add(conv2, r) -> Relu -> y (ResNet block)."""
    rng = _rng(seed)
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r"], name="relu1"),
             helper.make_node("Conv", ["r", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r"], ["s"], name="res_add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu2")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", c, 8, 8])],
                      [helper.make_tensor_value_info("y", F, ["N", c, 8, 8])],
                      [init("W1", weight(rng, c, c, 3, 3)), init("B1", weight(rng, c, scale=0.1)),
                       init("W2", weight(rng, c, c, 3, 3)), init("B2", weight(rng, c, scale=0.1))])


def shared_input_model(seed: int = 0, k: int = 32, n: int = 32) -> onnx.ModelProto:
    """x feeds two MatMuls (mm_a, mm_b) whose outputs are added."""
    rng = _rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "Wa"], ["a"], name="mm_a"),
             helper.make_node("MatMul", ["x", "Wb"], ["b"], name="mm_b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="sum")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, ["N", k])],
                      [helper.make_tensor_value_info("y", F, ["N", n])],
                      [init("Wa", weight(rng, k, n)), init("Wb", weight(rng, k, n))])


def act_matmul_model() -> onnx.ModelProto:
    """Batched MatMul of two activations (attention-like): q[N,16,32] @ k[N,32,24]."""
    nodes = [helper.make_node("MatMul", ["q", "k"], ["y"], name="bmm")]
    return make_model(nodes, [helper.make_tensor_value_info("q", F, ["N", 16, 32]),
                              helper.make_tensor_value_info("k", F, ["N", 32, 24])],
                      [helper.make_tensor_value_info("y", F, ["N", 16, 24])])


def random_feed(model: onnx.ModelProto, seed: int, batch: int = 8) -> dict[str, np.ndarray]:
    rng = _rng(seed)
    feed = {}
    for vi in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feed


def all_tensor_names(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input]
    names += [o for n in model.graph.node for o in n.output if o and o not in inits]
    return list(dict.fromkeys(names))


def max_abs_ranges(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """amax of every float activation: max |x| over ``feeds`` (real ORT runs)."""
    names = all_tensor_names(model)
    amax: dict[str, float] = {}
    with OrtRunner(model, extra_outputs=names) as r:
        for feed in feeds:
            for name, value in r.infer(feed).items():
                if np.issubdtype(value.dtype, np.floating):
                    amax[name] = max(amax.get(name, 0.0), float(np.max(np.abs(value))))
    return amax


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray], *, qdq: bool = False) -> dict[str, np.ndarray]:
    """Run on ORT CPU; ``qdq=True`` runs Q/DQ graphs exactly (``qdq_mode="exact"``): ORT's fused
    u8s8 kernels saturate on AVX2 hosts and made the SQNR tests host-dependent."""
    disabled = UNSAFE_QDQ_OPTIMIZERS if qdq else ()
    with OrtRunner(model, disabled_optimizers=disabled, qdq_mode="exact" if qdq else "fused") as r:
        return r.infer(feed)


def sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    ref = np.asarray(reference, dtype=np.float64)
    err = ref - np.asarray(candidate, dtype=np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / max(np.sum(err ** 2), 1e-30)))


def nodes_by_op(model: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op]


def producer_of(model: onnx.ModelProto, tensor: str) -> onnx.NodeProto | None:
    for n in model.graph.node:
        if tensor in n.output:
            return n
    return None


def qdq_pair_into(model: onnx.ModelProto, node_name: str,
                  slot: int) -> tuple[onnx.NodeProto, onnx.NodeProto]:
    """The (QuantizeLinear, DequantizeLinear) pair that feeds input ``slot`` of node
    ``node_name``; asserts that it is there."""
    node = next(n for n in model.graph.node if n.name == node_name)
    dq = producer_of(model, node.input[slot])
    assert dq is not None and dq.op_type == "DequantizeLinear", (node_name, slot)
    q = producer_of(model, dq.input[0])
    assert q is not None and q.op_type == "QuantizeLinear"
    return q, dq


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    raise KeyError(name)
