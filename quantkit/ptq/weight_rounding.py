"""Hessian-aware weight rounding (GPTQ / Optimal Brain Quantization) on the TensorRT grid.

Round-to-nearest rounds each weight on its own. The layer's output error for inputs ``X``
is ``||(W - Wq) X||^2 = tr(dW H dW^T)`` with ``H = X X^T``, so rounding one input column
down can be compensated by nudging the columns not yet rounded (Frantar et al. 2022,
"GPTQ", after Frantar & Alistarh 2022, "Optimal Brain Compression"): for each column ``i``
in turn, ``q_i = round(w_i / s)``, ``err = (w_i - s q_i) / U_ii`` and
``w_j -= err U_ij`` for ``j > i``, ``U`` the upper Cholesky factor of ``H^-1``.

TensorRT rules hold: the per-output-channel scale stays ``amax / 127`` of the original
weight (rule 3), the int8 values stay in [-127, 127] and each channel keeps one element at
+-127, the element that defines its amax, so ``qdq/insert.py`` recomputes the same scale
from the rewritten weights and stores the same int8 values. The step rewrites each INT8
node's float weight to ``s * q`` (already on the grid); the FP32 function of the graph
changes by the rounding, by design, as bias correction's does.

``H`` is accumulated in one streaming FP32 pass over the calibration data: memory
O(sum of K^2 per node) (Conv: ``K = C_in / group * kh * kw``; depthwise: ``group`` blocks
of ``kh * kw``), never the activations. numpy only; the pass itself is
:func:`input_hessians`, which runs ONNX Runtime through the ptq capture runner.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from quantkit.linalg import cholesky, gram, lower_inverse, matmul, solve_spd_right
from quantkit.ptq.graphutil import InitializerEditor, copy_model
from quantkit.ptq.step_record import StepRecord
from quantkit.graph.facts import attr, ensure_node_names
from quantkit.graph.grids import FP8_E4M3_MAX
from quantkit.qdq.scales import INT8_MAX, int8_scale, weight_amax_per_channel, weight_axis

log = logging.getLogger(__name__)

__all__ = ["RoundingLayer", "InputStats", "rounding_layers", "accumulate", "accumulate_hessian",
           "input_hessians", "gptq_round", "round_weights", "rounded_int8", "rounded_biases",
           "apply_rounding"]


@dataclass(frozen=True)
class RoundingLayer:
    """One weighted node: its data input, weight, and how ``W`` maps to ``(G, R, K)``.

    ``kind``: conv / gemm; conv carries ``group``, kernel, pads, strides, dilations."""

    node: str
    data: str
    weight: str
    kind: str
    group: int = 1
    kernel: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    trans_b: bool = False


def rounding_layers(model: onnx.ModelProto, nodes: Iterable[str]) -> tuple[
        list[RoundingLayer], dict[str, str]]:
    """The ``nodes`` whose weight can be rounded (2-D Conv with explicit pads, Gemm /
    MatMul with a constant 2-D weight), and node -> why not for the others."""
    ed = InitializerEditor(model)
    only = set(nodes)
    out, skipped = [], {}
    for n in model.graph.node:
        if n.name not in only or n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        if len(n.input) < 2 or not ed.is_initializer(n.input[1]) or ed.is_initializer(n.input[0]):
            skipped[n.name] = "weight is not an initializer"
            continue
        w = ed.array(n.input[1])
        if n.op_type == "Conv":
            if w.ndim != 4:
                skipped[n.name] = f"{w.ndim - 2}-D convolution (only 2-D is supported)"
                continue
            auto = attr(n, "auto_pad", b"NOTSET")
            auto = auto.decode() if isinstance(auto, bytes) else str(auto)
            if auto not in ("NOTSET", "VALID"):
                skipped[n.name] = f"auto_pad={auto} (explicit pads only)"
                continue
            pads = tuple(attr(n, "pads", [0, 0, 0, 0])) if auto == "NOTSET" else (0, 0, 0, 0)
            out.append(RoundingLayer(n.name, n.input[0], n.input[1], "conv",
                                     group=int(attr(n, "group", 1)),
                                     kernel=tuple(w.shape[2:]), pads=pads,
                                     strides=tuple(attr(n, "strides", [1, 1])),
                                     dilations=tuple(attr(n, "dilations", [1, 1]))))
        else:
            if w.ndim != 2 or (n.op_type == "Gemm" and int(attr(n, "transA", 0))):
                skipped[n.name] = "weight is not a 2-D [K, N] / [N, K] operand"
                continue
            out.append(RoundingLayer(n.name, n.input[0], n.input[1], "gemm",
                                     trans_b=n.op_type == "Gemm" and bool(attr(n, "transB", 0))))
    return out, skipped


def _patches(layer: RoundingLayer, x: np.ndarray) -> np.ndarray:
    """Input rows of a batch as the layer's weight sees them: ``(G, P, K)``, P the rows of
    every example (a conv: im2col of ``x`` [N, C, H, W] over the batch at once; a gemm:
    every row of ``x`` [..., K])."""
    if layer.kind == "gemm":
        return x.reshape(1, -1, x.shape[-1])
    n, c = x.shape[0], x.shape[1]
    kh, kw = layer.kernel
    pt, pl, pb, pr = layer.pads
    sh, sw = layer.strides
    dh, dw = layer.dilations
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (eh, ew), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, Ho, Wo, kh, kw)
    g = layer.group
    cg = c // g
    ho, wo = win.shape[2], win.shape[3]
    win = win.reshape(n, g, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    return win.reshape(g, n * ho * wo, cg * kh * kw)


#: float32 elements of one batch chunk's patches (about 64 MB): memory stays bounded on
#: wide early layers (a depthwise 112 x 112 layer of 96 channels: 9 values per row)
_CHUNK_ELEMENTS = 16 * 1024 * 1024
#: float32 elements of one group block's patches within a chunk (about 8 MB): arrays below
#: glibc's largest mmap threshold (32 MB) are reused from the heap instead of being mapped
#: and zeroed afresh per chunk, which cost a depthwise 112 x 112 layer 3x its arithmetic
_BLOCK_ELEMENTS = 2 * 1024 * 1024


def _chunks(layer: RoundingLayer, x: np.ndarray, xq: np.ndarray):
    """(x, xq) in example chunks whose patches stay under :data:`_CHUNK_ELEMENTS`."""
    if layer.kind == "gemm":
        yield x.reshape(-1, x.shape[-1]), xq.reshape(-1, xq.shape[-1])
        return
    kh, kw = layer.kernel
    sh, sw = layer.strides
    per = max(1, (x[0].size // max(sh * sw, 1)) * kh * kw)
    step = max(1, _CHUNK_ELEMENTS // per)
    for i in range(0, x.shape[0], step):
        yield x[i:i + step], xq[i:i + step]


def _group_blocks(layer: RoundingLayer, x: np.ndarray):
    """``(g0, g1, sub_layer)`` blocks of a grouped conv's groups whose patches of chunk ``x``
    stay under :data:`_BLOCK_ELEMENTS` (each group's rows, and so its sums, are the same as
    in one block of all groups); one block for a gemm or an ungrouped conv."""
    g = layer.group
    if layer.kind == "gemm" or g == 1:
        yield 0, g, layer
        return
    kh, kw = layer.kernel
    sh, sw = layer.strides
    per_group = max(1, (x.size // g // max(sh * sw, 1)) * kh * kw)
    size = max(1, _BLOCK_ELEMENTS // per_group)
    for g0 in range(0, g, size):
        g1 = min(g, g0 + size)
        yield g0, g1, dataclasses.replace(layer, group=g1 - g0)


@dataclass
class InputStats:
    """Streaming second moments of one node's input rows: ``h = sum Xq^T Xq`` (``Xq``: the
    rows as the INT8 node sees them, input Q/DQ applied when ``step`` is set, else FP32) and
    ``cross = sum (X - Xq)^T Xq`` (zero without input quantization), each ``(G, K, K)``."""

    h: np.ndarray | None = None
    cross: np.ndarray | None = None
    rows: int = 0
    #: sums of the FP32 rows and of the rows as quantized (G, K): the bias correction
    total: np.ndarray | None = None
    total_q: np.ndarray | None = None


def accumulate_hessian(layer: RoundingLayer, h: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """``h + sum X^T X`` over the rows of batch ``x`` (float64, shape ``(G, K, K)``)."""
    st = InputStats(h=h)
    accumulate(layer, st, x)
    return st.h


def _add(total: np.ndarray | None, part: np.ndarray, g0: int, g1: int, g: int) -> np.ndarray:
    """``total`` (``(G, ...)`` float64, None: zeros) with ``part`` added to groups g0:g1."""
    if total is None:
        if g0 == 0 and g1 == g:
            return part
        total = np.zeros((g, *part.shape[1:]), dtype=np.float64)
    total[g0:g1] += part
    return total


def accumulate(layer: RoundingLayer, st: InputStats, x: np.ndarray,
               step: float | None = None, *, quantized_input: np.ndarray | None = None
               ) -> None:
    """Add batch ``x`` (FP32 values) to ``st``; ``step``: the input's INT8 scale (its Q/DQ
    is applied to the rows ``h`` sees); ``quantized_input``: the same rows as a quantized
    network computes them (default ``x``), before that Q/DQ. Grouped convolutions go in
    blocks of groups (:func:`_group_blocks`): each group's sums are the same as in one."""
    x = np.asarray(x, dtype=np.float32)
    xq = x if quantized_input is None else np.asarray(quantized_input, dtype=np.float32)
    if xq.shape != x.shape:
        raise ValueError(f"quantized input shape {xq.shape} != FP32 input shape {x.shape}")
    g = layer.group if layer.kind == "conv" else 1
    for s, sq in _chunks(layer, x, xq):
        if step is not None:
            sq = np.clip(np.rint(sq / np.float32(step)), -128, INT8_MAX) * np.float32(step)
        same = step is None and quantized_input is None
        rows = 0
        for g0, g1, sub in _group_blocks(layer, s):
            c0, c1 = (g0 * (s.shape[1] // g), g1 * (s.shape[1] // g)) if g > 1 else (None, None)
            p = _patches(sub, s[:, c0:c1])
            pq = p if same else _patches(sub, sq[:, c0:c1])
            # exact sums (quantkit.linalg.gram): BLAS's float64 sums differ between kernels
            # at 1e-16, which GPTQ's column updates amplified into other rounded weights
            pq64 = pq.astype(np.float64)
            st.h = _add(st.h, gram(pq64), g0, g1, g)
            if pq is not p:
                st.cross = _add(st.cross, gram(p.astype(np.float64) - pq64, pq64), g0, g1, g)
                st.total = _add(st.total, p.sum(axis=1, dtype=np.float64), g0, g1, g)
                st.total_q = _add(st.total_q, pq.sum(axis=1, dtype=np.float64), g0, g1, g)
            rows = p.shape[1]
        st.rows += rows


def input_hessians(model: onnx.ModelProto, batches: Iterable[Mapping[str, np.ndarray]],
                   layers: Sequence[RoundingLayer], *, runner_factory=None,
                   input_amax: Mapping[str, float] | None = None) -> dict[str, InputStats]:
    """One FP32 pass: node -> :class:`InputStats` of its data input (streaming; O(K^2) per
    node). ``input_amax``: tensor -> amax of the node's input Q/DQ (activation-aware
    rounding: the statistics see each node's own input quantized); None: FP32 inputs, the
    weights-only objective. (Inputs as the whole INT8 network computes them were measured
    and dropped: without a sequential pass every layer corrects the same upstream error.)"""
    from quantkit.ptq.capture import _runner, require_batches

    graph_inputs = {i.name for i in model.graph.input}
    tensors = [t for t in dict.fromkeys(l.data for l in layers) if t not in graph_inputs]
    stats = {l.node: InputStats() for l in layers}
    amax = dict(input_amax or {})
    n = 0
    with (runner_factory or _runner)(model, tensors) as r:
        for feed in batches:
            res = r.infer(dict(feed))
            for l in layers:
                x = feed[l.data] if l.data in graph_inputs else res[l.data]
                a = amax.get(l.data)
                accumulate(l, stats[l.node], x, None if a is None else
                           float(int8_scale(a, where=f"amax[{l.data!r}]")))
            n += 1
    require_batches(n, "the weight-rounding statistics", "ptq.weight_rounding")
    return stats


def _grouped(layer: RoundingLayer, w: np.ndarray) -> np.ndarray:
    """``W`` as ``(G, R, K)``: G groups, R output channels per group, K inputs per row."""
    if layer.kind == "gemm":
        w2 = w if layer.trans_b else w.T  # [N, K]
        return w2[None].astype(np.float64)
    o = w.shape[0]
    return w.reshape(layer.group, o // layer.group, -1).astype(np.float64)


def _ungrouped(layer: RoundingLayer, wg: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if layer.kind == "gemm":
        return wg[0] if layer.trans_b else wg[0].T
    return wg.reshape(shape)


#: columns per lazy-batch block of :func:`gptq_round` (Frantar et al. 2023 use 128)
_BLOCK = 128
#: largest grid value per grid of :func:`gptq_round`
_QMAX = {"int8": float(INT8_MAX), "fp8": FP8_E4M3_MAX}


def _on_grid(v: np.ndarray, grid: str) -> np.ndarray:
    """``v`` (in units of the scale) rounded onto ``grid`` as float64: INT8 round half to
    even and clip to +-127; FP8 E4M3 TensorRT's cast (saturate to +-448, nearest even)."""
    if grid == "fp8":
        from quantkit.qdq.fp8 import FP8_DTYPE

        return np.clip(v, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(FP8_DTYPE).astype(np.float64)
    return np.clip(np.rint(v), -INT8_MAX, INT8_MAX)


def gptq_round(w: np.ndarray, h: np.ndarray, scale: np.ndarray, *, damp: float = 0.01,
               grid: str = "int8") -> np.ndarray:
    """Grid values (as float64) for ``w`` ``(G, R, K)`` under ``h`` ``(G, K, K)`` and
    ``scale`` ``(G, R)``. Columns go in decreasing ``diag(h)`` order (GPTQ's act-order). The
    updates of later columns are batched per block of :data:`_BLOCK` columns (the same
    result as column by column, up to float summation order; Frantar et al. 2023, GPTQ).

    ``grid``: ``int8`` (per-row scales; each row's largest-magnitude element is forced to
    +-127, it defines the row's scale) or ``fp8`` (E4M3, round to nearest even, saturating at
    +-448; one scale per tensor, so only the tensor's largest-magnitude element is forced
    to +-448)."""
    if grid not in _QMAX:
        raise ValueError(f"grid {grid!r}: expected one of {sorted(_QMAX)}")
    qmax = _QMAX[grid]
    g, r, k = w.shape
    w = w.copy()
    h = np.array(h, dtype=np.float64)
    diag = np.einsum("gkk->gk", h)
    dead = diag <= 0
    idx = np.arange(k)
    h[:, idx, idx] += damp * np.maximum(diag.mean(axis=1, keepdims=True), 1e-12) + dead
    order = np.argsort(-diag, axis=1, kind="stable")  # (G, K)
    hp = np.take_along_axis(np.take_along_axis(h, order[:, :, None], 1), order[:, None, :], 2)
    wp = np.take_along_axis(w, np.broadcast_to(order[:, None, :], w.shape), 2)
    # upper u with hp^-1 = u^T u: u = J L^-1 J for L the Cholesky factor of J hp J (J reverses
    # the order), in quantkit.linalg: the same bits on every BLAS kernel
    u = lower_inverse(cholesky(hp[:, ::-1, ::-1]))[:, ::-1, ::-1]
    s = scale.astype(np.float64)[:, :, None]
    anchor = np.argmax(np.abs(wp), axis=2)  # (G, R): the element defining each row's amax
    sign = np.sign(np.take_along_axis(wp, anchor[:, :, None], 2))[:, :, 0]
    if grid == "fp8":  # one scale per tensor: only the tensor's amax element is pinned
        top = np.unravel_index(int(np.argmax(np.abs(wp))), wp.shape)
        pinned = np.full(anchor.shape, -1)
        pinned[top[0], top[1]] = top[2]
        anchor = pinned
    q = np.zeros_like(wp)
    for i1 in range(0, k, _BLOCK):  # GPTQ's lazy batch updates: a GEMM per block of columns
        i2 = min(i1 + _BLOCK, k)
        block = wp[:, :, i1:i2].copy()
        errs = np.zeros_like(block)
        for j in range(i2 - i1):
            i = i1 + j
            col = block[:, :, j]
            qi = _on_grid(col / s[:, :, 0], grid)
            qi = np.where(anchor == i, sign * qmax, qi)
            q[:, :, i] = qi
            err = (col - qi * s[:, :, 0]) / u[:, i, i][:, None]
            errs[:, :, j] = err
            if j + 1 < i2 - i1:
                block[:, :, j + 1:] -= err[:, :, None] * u[:, None, i, i + 1:i2]
        if i2 < k:
            wp[:, :, i2:] -= matmul(errs, u[:, i1:i2, i2:])
    inv = np.argsort(order, axis=1)
    return np.take_along_axis(q, np.broadcast_to(inv[:, None, :], q.shape), 2)


def _damped_solve(a: np.ndarray, h: np.ndarray, damp: float) -> np.ndarray:
    """``a (h + damp * mean(diag h) I)^-1`` per group (dead inputs get a unit diagonal)."""
    h = np.array(h, dtype=np.float64)
    diag = np.einsum("gkk->gk", h)
    idx = np.arange(h.shape[1])
    h[:, idx, idx] += damp * np.maximum(diag.mean(axis=1, keepdims=True), 1e-12) + (diag <= 0)
    return solve_spd_right(a, h)


def _add_to_bias(node: onnx.NodeProto, ed: InitializerEditor, shift: np.ndarray,
                 skip: dict) -> str | None:
    """``shift`` added to ``node``'s bias; the name of the node holding that bias (an Add
    reader of a MatMul), None when there is none."""
    from quantkit.ptq.bias_correction import writable_bias

    where = writable_bias(node, ed, shift.size)
    if where is None:
        skip[f"{node.name}:bias"] = "no constant bias to correct"
        return None
    owner, slot = where
    b = ed.array(owner.input[slot])
    ed.replace(owner, slot, (b.astype(np.float64) + shift.reshape(b.shape)).astype(b.dtype))
    return owner.name


def _output_error(dw: np.ndarray, h: np.ndarray) -> float:
    """``tr(dW H dW^T)`` summed over groups: the layer's squared output error (batched
    products of :func:`quantkit.linalg.matmul`, the same bits on every BLAS kernel; a
    three-operand ``einsum`` loops in C over every (r, k, l), far slower)."""
    return float(np.sum(matmul(dw, h) * dw))


@dataclass
class _Totals:
    nearest: float = 0.0
    rounded: float = 0.0
    changes: dict[str, str] = field(default_factory=dict)
    groups: list[tuple[str, ...]] = field(default_factory=list)


def round_weights(model: onnx.ModelProto, layers: Sequence[RoundingLayer],
                  hessians: Mapping[str, "InputStats"], *, damp: float = 0.01,
                  skipped: Mapping[str, str] | None = None, summary: bool = True,
                  grid: str = "int8") -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` whose ``layers`` have GPTQ-rounded weights (``s * q``, on the
    INT8 grid of the original per-channel scale, or with ``grid="fp8"`` on the FP8 E4M3 grid
    of the original per-tensor scale ``amax / 448``: TensorRT's FP8 weight granularity); the
    record lists each node's output error ``tr(dW H dW^T)`` relative to round-to-nearest.
    ``summary``: log the totals at INFO (else DEBUG: the sequential rounding calls this once
    per node)."""
    m = copy_model(model)
    ensure_node_names(m)
    ed = InitializerEditor(m)
    by_name = {n.name: n for n in m.graph.node}
    tot = _Totals()
    skip = dict(skipped or {})
    for layer in layers:
        if layer.node not in hessians:
            skip[layer.node] = "no input statistics"
            continue
        node = by_name[layer.node]
        w = ed.array(layer.weight)
        wg = _grouped(layer, w)
        sg = _grid_scale(node, layer, w, grid).reshape(wg.shape[0], wg.shape[1])
        st = hessians[layer.node]
        h = st.h
        if st.cross is not None:  # the FP32 output from quantized inputs: least-squares target
            wg = wg + _damped_solve(matmul(wg, st.cross), h, damp)
        q = gptq_round(wg, h, sg, damp=damp, grid=grid)
        nearest = _on_grid(_grouped(layer, w) / sg[:, :, None], grid)
        e_near = _output_error(wg - nearest * sg[:, :, None], h)
        e_gptq = _output_error(wg - q * sg[:, :, None], h)
        if not e_gptq < e_near:
            skip[layer.node] = (f"no gain over round-to-nearest (output error {e_gptq:.3g} "
                                f"vs {e_near:.3g})")
            continue
        new = _ungrouped(layer, q * sg[:, :, None], w.shape).astype(w.dtype)
        ed.replace(node, 1, new)
        owner = None
        if st.total is not None:  # the mean output the rounded node misses, into its bias
            w0 = _grouped(layer, w)
            mu, muq = st.total / max(st.rows, 1), st.total_q / max(st.rows, 1)
            shift = (np.einsum("grk,gk->gr", w0, mu)
                     - np.einsum("grk,gk->gr", q * sg[:, :, None], muq)).reshape(-1)
            owner = _add_to_bias(node, ed, shift, skip)
        tot.groups.append(tuple(dict.fromkeys(x for x in (layer.node, owner) if x)))
        tot.nearest += e_near
        tot.rounded += e_gptq
        tot.changes[layer.node] = (f"output error {e_gptq / max(e_near, 1e-30):.3f} x "
                                   f"round-to-nearest")
    (log.info if summary else log.debug)(
        "weight rounding: %d nodes rewritten (output error %.3f x nearest), %d skipped",
        len(tot.changes), tot.rounded / max(tot.nearest, 1e-30), len(skip))
    aware = any(st.cross is not None for st in hessians.values())
    params = {"method": "gptq", "damp": float(damp), "activation_aware": aware}
    if grid != "int8":
        params["grid"] = grid
    return m, StepRecord("weight_rounding", params,
                         tot.changes, skip, tuple(tot.groups))


def _grid_scale(node: onnx.NodeProto, layer: RoundingLayer, w: np.ndarray, grid: str
                ) -> np.ndarray:
    """The scale of ``w`` on ``grid`` as float64, one value per output row of
    :func:`_grouped`'s ``(G, R)``: INT8 per output channel (``amax / 127``), FP8 per tensor
    (``amax / 448``, repeated)."""
    if grid == "fp8":
        from quantkit.qdq.fp8 import fp8_weight_scale

        rows = int(np.prod(_grouped(layer, w).shape[:2]))
        s = fp8_weight_scale(w, where=f"weight {layer.weight}")
        return np.full(rows, float(s), dtype=np.float64)
    axis = weight_axis(node.op_type, w.ndim, {"transB": int(layer.trans_b)})
    return int8_scale(weight_amax_per_channel(w, axis),
                      where=f"weight {layer.weight}").astype(np.float64)


def rounded_int8(model: onnx.ModelProto, rounded: onnx.ModelProto, nodes: Sequence[str]
                 ) -> dict[str, np.ndarray]:
    """node -> the int8 values of its rounded weight (``rounded``) on the per-channel scale
    of its original weight (``model``): what a cache stores (4x smaller than floats)."""
    ed0, ed1 = InitializerEditor(model), InitializerEditor(rounded)
    n0 = {n.name: n for n in model.graph.node}
    n1 = {n.name: n for n in rounded.graph.node}
    out = {}
    for name in nodes:
        w0, w1 = ed0.array(n0[name].input[1]), ed1.array(n1[name].input[1])
        s = _scale(n0[name], w0)
        out[name] = np.clip(np.rint(w1 / s), -INT8_MAX, INT8_MAX).astype(np.int8)
    return out


def rounded_biases(model: onnx.ModelProto, rounded: onnx.ModelProto, nodes: Sequence[str]
                   ) -> dict[str, np.ndarray]:
    """node -> its bias in ``rounded`` where the rounding changed it (activation-aware
    rounding moves the mean output it misses into the bias)."""
    from quantkit.ptq.bias_correction import bias_slot

    ed0, ed1 = InitializerEditor(model), InitializerEditor(rounded)
    n0 = {n.name: n for n in model.graph.node}
    n1 = {n.name: n for n in rounded.graph.node}
    out = {}
    for name in nodes:
        w = ed1.array(n1[name].input[1])
        size = int(w.shape[weight_axis(n1[name].op_type, w.ndim,
                                       {"transB": attr(n1[name], "transB", 0)})])
        where1 = bias_slot(n1[name], ed1, size)
        if where1 is None or where1[1] is None:
            continue
        b1 = ed1.array(where1[0].input[where1[1]])
        where0 = bias_slot(n0[name], ed0, size)
        b0 = (ed0.array(where0[0].input[where0[1]]) if where0 and where0[1] is not None
              else np.zeros_like(b1))
        if not np.array_equal(b0, b1):
            out[name] = b1
    return out


def apply_rounding(model: onnx.ModelProto, int8: Mapping[str, np.ndarray],
                   biases: Mapping[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """A copy of ``model`` whose nodes in ``int8`` get weight ``scale * int8`` (the scale of
    their original weight) and the nodes in ``biases`` that bias: :func:`rounded_int8` and
    :func:`rounded_biases` undone."""
    from quantkit.ptq.bias_correction import writable_bias

    m = copy_model(model)
    ed = InitializerEditor(m)
    for n in list(m.graph.node):
        if n.name in int8:
            w = ed.array(n.input[1])
            ed.replace(n, 1, (int8[n.name].astype(np.float32) * _scale(n, w)).astype(w.dtype))
        if biases and n.name in biases:
            owner, slot = writable_bias(n, ed, int(biases[n.name].size))
            ed.replace(owner, slot, biases[n.name])
    return m


def _scale(node: onnx.NodeProto, w: np.ndarray) -> np.ndarray:
    """The per-channel INT8 scale of ``w`` broadcastable against ``w``."""
    axis = weight_axis(node.op_type, w.ndim, {"transB": attr(node, "transB", 0)})
    s = int8_scale(weight_amax_per_channel(w, axis), where=f"weight {node.input[1]}")
    shape = [1] * w.ndim
    shape[axis] = -1
    return s.reshape(shape)
