"""Bias correction: remove the systematic output shift weight quantization causes.

For an INT8 node with weight ``W`` (quantized per output channel exactly as
``qdq/insert.py`` does, ``Wq = fake_quantize(W)``), the expected output shift for an input
whose per-channel mean is ``mu`` is ``E[x] (Wq - W)`` per output channel (Nagel et al.
2019, "Data-Free Quantization", section 4.2, the empirical variant: ``mu`` from calibration
data). The correction subtracts it from the node's bias:

- Conv / ConvTranspose / Gemm: their bias input (created, zeros, when absent);
- MatMul: the constant operand of the Add that is its output's only reader (the bias of a
  PyTorch Linear export); a MatMul without one is skipped with the reason.

Conv: ``shift[o] = sum_{c,k} (Wq - W)[o, c, k] * mu[c]`` (padding edges ignored).
Call **after the Plan, before Q/DQ insertion**, on the graph that will be quantized (after
SmoothQuant / equalization, whose weights are the ones quantized). Needs the per-channel
mean of each INT8 node's data input: ``ptq.capture.channel_stats`` with
:func:`input_channel_axes`. The FP32 reference stays the unedited model: this step changes
the graph's FP32 function by design, by ``-shift`` (zero when ``W`` is already on the INT8
grid).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from quantkit.ptq.graphutil import InitializerEditor, copy_model
from quantkit.ptq.step_record import StepRecord
from quantkit.graph.facts import attr, ensure_node_names
from quantkit.qdq.scales import fake_quantize, int8_scale, weight_amax_per_channel, weight_axis

log = logging.getLogger(__name__)

__all__ = ["input_channel_axes", "weight_shift", "correct_bias", "bias_slot", "writable_bias"]


def input_channel_axes(model: onnx.ModelProto, nodes: Iterable[str]) -> dict[str, int]:
    """data-input tensor -> its channel axis (Conv: 1; MatMul / Gemm: -1) for ``nodes``
    that have a constant weight."""
    ed = InitializerEditor(model)
    only = set(nodes)
    out: dict[str, int] = {}
    for n in model.graph.node:
        if n.name in only and n.op_type in ("Conv", "MatMul", "Gemm") and len(n.input) > 1 \
                and ed.is_initializer(n.input[1]) and not ed.is_initializer(n.input[0]):
            if n.op_type == "Gemm" and int(attr(n, "transA", 0)):
                continue
            out[n.input[0]] = 1 if n.op_type == "Conv" else -1
    return out


def quantized_weight(node: onnx.NodeProto, w: np.ndarray) -> np.ndarray:
    """``w`` after the per-channel INT8 Q -> DQ that insert_qdq writes for ``node``."""
    axis = weight_axis(node.op_type, w.ndim, {"transB": attr(node, "transB", 0)})
    scale = int8_scale(weight_amax_per_channel(w, axis), where=f"weight {node.input[1]}")
    return fake_quantize(w, scale, axis)


def weight_shift(node: onnx.NodeProto, w: np.ndarray, mu: np.ndarray) -> np.ndarray | None:
    """Expected per-output-channel output shift ``E[x](Wq - W)`` for input mean ``mu``."""
    dw = quantized_weight(node, w).astype(np.float64) - w.astype(np.float64)
    mu = np.asarray(mu, dtype=np.float64).reshape(-1)
    if node.op_type == "MatMul" and w.ndim == 2 and w.shape[0] == mu.size:
        return np.einsum("k,kn->n", mu, dw)  # numpy's loops: the same bits on every BLAS kernel
    if node.op_type == "Gemm" and w.ndim == 2:
        dw = dw if int(attr(node, "transB", 0)) else dw.T  # -> [N, K]
        return np.einsum("nk,k->n", dw, mu) if dw.shape[1] == mu.size else None
    if node.op_type == "Conv" and w.ndim >= 3:
        group = int(attr(node, "group", 1))
        c_per_g = w.shape[1]
        if c_per_g * group != mu.size:
            return None
        per_in = dw.reshape(w.shape[0], c_per_g, -1).sum(axis=2)  # [O, C/g]
        o_per_g = w.shape[0] // group
        mus = mu.reshape(group, c_per_g)[np.arange(w.shape[0]) // o_per_g]  # [O, C/g]
        return (per_in * mus).sum(axis=1)
    return None


def correct_bias(model: onnx.ModelProto, nodes: Iterable[str],
                 input_mean: Mapping[str, np.ndarray], *, min_relative_shift: float = 0.0
                 ) -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` whose INT8 ``nodes`` have bias -= expected weight-quantization
    shift. ``input_mean``: per-channel mean of each node's data input (calibration data)."""
    m = copy_model(model)
    ensure_node_names(m)
    ed = InitializerEditor(m)
    only = set(nodes)
    changes, skipped = {}, {}
    groups: list[tuple[str, ...]] = []
    for n in list(m.graph.node):
        if n.name not in only or n.op_type not in ("Conv", "MatMul", "Gemm"):
            continue
        if len(n.input) < 2 or not ed.is_initializer(n.input[1]):
            skipped[n.name] = "weight is not an initializer"
            continue
        x = n.input[0]
        if x not in input_mean:
            skipped[n.name] = f"no input mean for {x}"
            continue
        w = ed.array(n.input[1])
        shift = weight_shift(n, w, input_mean[x])
        if shift is None:
            skipped[n.name] = "weight / input shapes not supported"
            continue
        where = writable_bias(n, ed, shift.size)
        if where is None:
            skipped[n.name] = "no constant bias to correct (MatMul without a single Add reader)"
            continue
        owner, slot = where
        b = ed.array(owner.input[slot])
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        rel = float(np.max(np.abs(shift))) / max(scale, 1e-12)
        if rel < min_relative_shift:
            skipped[n.name] = f"shift {rel:.2g} of the bias is below {min_relative_shift}"
            continue
        ed.replace(owner, slot, (b.astype(np.float64) - shift.reshape(b.shape)).astype(b.dtype))
        changes[n.name] = (f"bias {owner.input[slot]} -= shift (max |shift| "
                           f"{np.max(np.abs(shift)):.3g}, mean {np.mean(shift):+.3g})")
        groups.append(tuple(dict.fromkeys((n.name, owner.name))))
    log.info("bias correction: %d nodes corrected, %d skipped", len(changes), len(skipped))
    return m, StepRecord("bias_correction", {"min_relative_shift": float(min_relative_shift)},
                         changes, skipped, tuple(groups))


def writable_bias(node: onnx.NodeProto, ed: InitializerEditor, n_out: int):
    """(node owning the bias, input slot) of ``node``'s constant bias, adding a zero bias
    input to a Conv / Gemm without one; None when there is none to edit."""
    where = bias_slot(node, ed, n_out)
    if where is None or where[1] is not None:
        return where
    name = ed.add(f"{node.name}__bias", np.zeros(n_out, np.float32))
    while len(node.input) < 3:
        node.input.append("")
    node.input[2] = name
    return node, 2


def bias_slot(node: onnx.NodeProto, ed: InitializerEditor, n_out: int):
    """(node owning the bias, input slot) or (node, None) when a bias input can be added."""
    if node.op_type in ("Conv", "Gemm"):
        if len(node.input) > 2 and node.input[2]:
            b = ed.array(node.input[2])
            return (node, 2) if b is not None and b.size == n_out and b.ndim == 1 else None
        return (node, None)
    readers = ed.readers.get(node.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Add":
        return None
    add = readers[0]
    for slot in (0, 1):
        t = add.input[slot]
        if t != node.output[0] and ed.is_initializer(t):
            b = ed.array(t)
            if b.ndim == 1 and b.size == n_out:
                return (add, slot)
    return None
