"""Channel shift (Outlier Suppression+, Wei et al. 2023) of MatMul / Gemm inputs.

INT8 activations in TensorRT are symmetric (zero point 0), so a channel whose calibration
values sit in ``[lo_j, hi_j]`` away from 0 wastes part of the grid: a GELU output
(``[-0.17, 9]``) uses half of it, a LayerNorm output whose bias ``beta_j`` is large is
off-centre on its outlier channels. For an activation ``x`` [..., K] read by MatMul / Gemm
nodes with a constant weight ``W``, the shift ``z_j`` (about ``(lo_j + hi_j) / 2``, below) centres
each channel: ``x - z`` is quantized, and each reader gets ``z @ W`` added to its output, so
``(x - z) @ W + z @ W = x @ W``: the FP32 function is unchanged (to float rounding; proven
per model by :mod:`quantkit.ptq.proof`). Where ``z @ W`` goes: into the reader's bias (the
constant of the one ``Add`` that reads the output, or Gemm's ``C``), else a new constant
``Add`` after the reader.

Centring must not make a sparse activation dense: a GELU / ReLU channel that is near 0 on
most tokens and large on few would, shifted by half its range, carry a large value on every
token, and the weight's quantization error (``x @ dW``) grows with it (plain midpoints on
MiniLM under SmoothQuant 0.8, which moves the difficulty into the weights; measured:
benchmarks/results/bert_int8.md, "Recipe trials"). So ``z_j`` is the midpoint clipped to
``[0, 2 * mean_j]``, where ``E[(x_j - z_j)^2] <= E[x_j^2]``: the channel's second moment
never grows. A LayerNorm channel centred on its ``beta_j`` keeps its full shift. A tensor is
shifted only when this narrows its per-tensor range (the largest ``max(|lo_j|, |hi_j|)``
against the largest ``max(hi_j - z_j, z_j - lo_j)``) by at least ``min_gain``; the
per-tensor scale is what INT8 pays for. Call on the FP32 graph before
SmoothQuant (which then scales the centred tensor): ``smoothable_inputs`` ->
``ptq.capture.channel_stats(..., axis=-1)`` -> ``shift_activations``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

from quantkit.graph.facts import attr, consumers
from quantkit.ptq.graphutil import InitializerEditor, reader_weights
from quantkit.ptq.input_rewrite import InputRewrite
from quantkit.ptq.step_record import StepRecord

log = logging.getLogger(__name__)

__all__ = ["channel_shift", "shift_activations"]


def channel_shift(low: np.ndarray, high: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Per-channel shift: the midpoint ``(low + high) / 2`` clipped to ``[0, 2 * mean]``
    (module doc: centring never raises a channel's second moment)."""
    mid = (np.asarray(low, np.float64) + np.asarray(high, np.float64)) / 2.0
    cap = 2.0 * np.asarray(mean, np.float64)
    return np.where(cap >= 0, np.clip(mid, 0.0, np.maximum(cap, 0.0)),
                    np.clip(mid, np.minimum(cap, 0.0), 0.0))


def shift_activations(model: onnx.ModelProto, low: Mapping[str, np.ndarray],
                      high: Mapping[str, np.ndarray], mean: Mapping[str, np.ndarray], *,
                      min_gain: float = 1.25) -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` with every smoothable input that has per-channel ``low`` /
    ``high`` / ``mean`` (last axis, calibration data) centred (module doc). Returns the
    model and what was changed."""
    rw = InputRewrite(model)
    m, ed, skipped = rw.model, rw.editor, rw.skipped
    readers_of = consumers(m.graph)
    for x, names in rw.groups.items():
        if x not in low or x not in high or x not in mean:
            skipped[x] = "no per-channel statistics"
            continue
        lo = np.asarray(low[x], dtype=np.float64).reshape(-1)
        hi = np.asarray(high[x], dtype=np.float64).reshape(-1)
        z64 = channel_shift(lo, hi, np.asarray(mean[x]).reshape(-1))
        before = float(np.max(np.maximum(-lo, hi)))
        after = float(np.max(np.maximum(z64 - lo, hi - z64)))
        if not np.isfinite(before) or after <= 0 or before / after < min_gain:
            skipped[x] = f"centring narrows the range {before:.3g} -> {after:.3g} only"
            continue
        readers = [rw.by_name[n] for n in names]
        found = reader_weights(ed, readers, lo.size)
        if isinstance(found, str):
            skipped[x] = found
            continue
        ws, axes = found
        z = z64.astype(np.float32)
        zc = ed.add(f"{x}__shift", z)
        y = ed.fresh_tensor(f"{x}__shifted")
        sub = helper.make_node("Sub", [x, zc], [y], name=ed.fresh_node(f"{x}__shift_Sub"))
        group = [sub.name, *names]
        rw.insert_before(sub, names)
        for r, w, ax in zip(readers, ws, axes):
            r.input[0] = y
            comp = np.einsum("k,kn->n", z.astype(np.float64),  # no BLAS: the same bits on
                             (w if ax == 0 else w.T).astype(np.float64)  # every kernel
                             ).astype(np.float32)
            group += _compensate(m, ed, r, comp, readers_of, rw.outputs, rw.new_nodes)
        rw.rewrites.append(tuple(group))
        rw.changes[x] = (f"centred for {len(names)} reader(s) ({', '.join(names[:3])}"
                         f"{' ...' if len(names) > 3 else ''}); range {before:.3g} -> "
                         f"{after:.3g}")
    log.info("shift: %d tensors centred, %d skipped", len(rw.changes), len(skipped))
    return rw.finish("shift", {"min_gain": float(min_gain)})


def _compensate(m: onnx.ModelProto, ed: InitializerEditor, reader: onnx.NodeProto,
                comp: np.ndarray, readers_of, outputs: set[str],
                new_nodes: list[tuple[int, onnx.NodeProto]]) -> list[str]:
    """Add ``comp`` ([N], ``z @ W``) to ``reader``'s output: into its bias where it has a
    constant one, else through a new Add. Returns the names of the nodes changed or inserted
    besides ``reader``."""
    if reader.op_type == "Gemm":
        if len(reader.input) >= 3 and ed.is_initializer(reader.input[2]):
            c = ed.array(reader.input[2])
            alpha, beta = (float(attr(reader, k, 1.0)) for k in ("alpha", "beta"))
            if c.shape in ((comp.size,), (1, comp.size)) and beta != 0.0:
                ed.replace(reader, 2, c + (alpha / beta) * comp.reshape(c.shape))
                return []
        comp = comp * float(attr(reader, "alpha", 1.0))
    else:
        out = reader.output[0]
        adds = readers_of.get(out, [])
        if out not in outputs and len(adds) == 1 and adds[0].op_type == "Add" \
                and len(adds[0].input) == 2 and list(adds[0].input).count(out) == 1:
            add = adds[0]
            slot = 1 - list(add.input).index(out)
            b = ed.array(add.input[slot]) if ed.is_initializer(add.input[slot]) else None
            if b is not None and b.shape == (comp.size,):
                ed.replace(add, slot, b + comp)
                return [add.name]
    raw = ed.fresh_tensor(f"{reader.output[0]}__unshifted")
    cc = ed.add(f"{reader.name}__shift_bias", comp)
    add = helper.make_node("Add", [raw, cc], [reader.output[0]],
                           name=ed.fresh_node(f"{reader.name}__shift_Add"))
    reader.output[0] = raw
    pos = next(i for i, n in enumerate(m.graph.node) if n is reader)
    new_nodes.append((pos + 1, add))
    return [add.name]
