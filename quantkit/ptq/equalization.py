"""Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization", section 4.1).

For two Convs in a chain ``conv1 -> [Relu | Clip(0, c)] -> conv2`` (conv1's output read
only by the activation, the activation's only by conv2), output channel ``i`` of conv1
feeds input channel ``i`` of conv2. With ``r1_i`` = max |W1[i]| and ``r2_i`` = max |W2[:, i]|,
``s_i = sqrt(r1_i / r2_i)`` (> 0); ``W1[i] /= s_i``, ``b1[i] /= s_i``, ``W2[:, i] *= s_i``
equalizes both ranges to ``sqrt(r1_i r2_i)``. A positive per-channel scale commutes with
Relu, so the FP32 function is unchanged.

ReLU6 (``Clip(x, 0, 6)``) does not commute: ``Clip(x / s, 0, 6) != Clip(x, 0, 6) / s``. With
``relu6="per_channel_clip"`` (default) the Clip becomes ``Min(Relu(x), 6 / s)`` with a
per-channel constant bound [C, 1, 1], which is exactly ``Clip(x, 0, 6) / s``: FP32 unchanged,
and the activation's per-tensor range is what equalization made it. ``relu6="skip"`` leaves
such pairs alone (MobileNetV2 then has nothing to equalize: all its depthwise pairs have a
ReLU6 between). A Clip whose lower bound is not 0 is always skipped (no positive scale
commutes with it).

Pairs are equalized ``iterations`` times in graph order (chains of three converge). Call on
the FP32 graph **before calibration** (the activations change).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import helper

from quantkit.errors import ConfigError
from quantkit.ptq.graphutil import InitializerEditor, copy_model
from quantkit.ptq.step_record import StepRecord
from quantkit.graph.facts import attr, constant_arrays, ensure_node_names

log = logging.getLogger(__name__)

__all__ = ["find_pairs", "pair_inputs", "equalize_pairs", "RELU6_MODES"]

RELU6_MODES = ("per_channel_clip", "skip")
_SCALE_LIMITS = (1e-3, 1e3)


def _clip_bounds(node: onnx.NodeProto, consts: dict) -> tuple[float, float] | None:
    lo, hi = float(attr(node, "min", -np.inf)), float(attr(node, "max", np.inf))
    for slot in (1, 2):
        if len(node.input) > slot and node.input[slot]:
            v = consts.get(node.input[slot])
            if v is None or np.size(v) != 1:
                return None
            if slot == 1:
                lo = float(np.reshape(v, -1)[0])
            else:
                hi = float(np.reshape(v, -1)[0])
    return lo, hi


def find_pairs(model: onnx.ModelProto) -> list[tuple[str, str | None, str, str]]:
    """(conv1, activation node or None, conv2, kind) chains; kind is "linear", "relu" or
    "relu6" (any Clip(0, c)). Conv2 may be grouped (depthwise)."""
    ensure_node_names(model)
    g = model.graph
    consts = constant_arrays(g)
    inits = {t.name for t in g.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in dict.fromkeys(n.input):
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    pairs = []

    def conv_ok(n):
        return n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in inits

    for c1 in g.node:
        if not conv_ok(c1):
            continue
        t = c1.output[0]
        if t in outputs or len(readers.get(t, [])) != 1:
            continue
        nxt, act, kind = readers[t][0], None, "linear"
        if nxt.op_type in ("Relu", "Clip"):
            if nxt.op_type == "Clip":
                b = _clip_bounds(nxt, consts)
                if b is None or b[0] != 0.0:
                    continue
                kind = "relu" if not np.isfinite(b[1]) else "relu6"
            else:
                kind = "relu"
            act = nxt
            t = nxt.output[0]
            if t in outputs or len(readers.get(t, [])) != 1:
                continue
            nxt = readers[t][0]
        if conv_ok(nxt) and nxt.input[0] == t:
            pairs.append((c1.name, act.name if act else None, nxt.name, kind))
    return pairs


def pair_inputs(model: onnx.ModelProto) -> list[str]:
    """The tensors between equalizable pairs (each pair's conv2 input), for channel stats."""
    by_name = {n.name: n for n in model.graph.node}
    return [by_name[c2].input[0] for _c1, _act, c2, _kind in find_pairs(model)]


def equalize_pairs(model: onnx.ModelProto, *, relu6: str = "per_channel_clip",
                   iterations: int = 2,
                   activation_absmax: Mapping[str, np.ndarray] | None = None,
                   alpha: float = 0.5) -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` with every Conv pair of :func:`find_pairs` equalized.

    ``activation_absmax`` (tensor between the pair -> per-channel max-abs, axis 1, from
    calibration on this graph): activation-aware scales ``s = a**alpha / r2**(1 - alpha)``
    (SmoothQuant's rule, for the per-tensor activation between the pair; one pass) instead
    of the weight-only CLE scales. The pair's input tensor is conv2's input (:func:`pair_inputs`).
    """
    if relu6 not in RELU6_MODES:
        raise ConfigError("unknown ReLU6 handling", where="ptq.equalization.relu6", value=relu6,
                          fix=f"use one of {', '.join(RELU6_MODES)}")
    if int(iterations) < 1:
        raise ConfigError("equalization needs at least one iteration",
                          where="ptq.equalization.iterations", value=iterations, fix="use 1 or more")
    m = copy_model(model)
    pairs = find_pairs(m)
    ed = InitializerEditor(m)
    by_name = {n.name: n for n in m.graph.node}
    changes, skipped = {}, {}
    groups: list[tuple[str, ...]] = []
    todo = []
    for c1, act, c2, kind in pairs:
        key = f"{c1} -> {c2}"
        if kind == "relu6" and relu6 == "skip":
            skipped[key] = "ReLU6 between (relu6=skip)"
            continue
        if any(len(ed.readers.get(by_name[c].input[1], [])) > 1 for c in (c1, c2)):
            skipped[key] = "a weight is shared with another node"
            continue
        todo.append((c1, act, c2, kind))
    weights = {c: ed.array(by_name[c].input[1]).astype(np.float64)
               for p in todo for c in (p[0], p[2])}
    biases = {}
    for c1, *_ in todo:
        n = by_name[c1]
        if len(n.input) > 2 and n.input[2]:
            biases[c1] = ed.array(n.input[2]).astype(np.float64)
    total = {p[0]: None for p in todo}
    if activation_absmax is not None:
        iterations = 1
    for _ in range(int(iterations)):
        for c1, act, c2, kind in todo:
            w1, w2 = weights[c1], weights[c2]
            n2 = by_name[c2]
            group = int(attr(n2, "group", 1))
            c_in = w2.shape[1] * group
            if w1.shape[0] != c_in:
                continue
            r1 = np.max(np.abs(w1.reshape(w1.shape[0], -1)), axis=1)
            r2 = _input_channel_absmax(w2, group)
            x2 = n2.input[0]
            if activation_absmax is not None:
                if x2 not in activation_absmax:
                    continue
                a = np.asarray(activation_absmax[x2], dtype=np.float64).reshape(-1)
                s = np.where((a > 0) & (r2 > 0), np.maximum(a, 1e-12) ** alpha
                             / np.maximum(r2, 1e-12) ** (1.0 - alpha), 1.0)
            else:
                s = np.where((r1 > 0) & (r2 > 0), np.sqrt(r1 / np.maximum(r2, 1e-30)), 1.0)
            s = np.clip(s, *_SCALE_LIMITS)
            weights[c1] = w1 / s.reshape((-1,) + (1,) * (w1.ndim - 1))
            if c1 in biases:
                biases[c1] = biases[c1] / s
            weights[c2] = _scale_input_channels(w2, s, group)
            total[c1] = s if total[c1] is None else total[c1] * s
    for c1, act, c2, kind in todo:
        s = total[c1]
        if s is None:
            skipped[f"{c1} -> {c2}"] = "channel counts do not match"
            continue
        for c in (c1, c2):
            ed.replace(by_name[c], 1, weights[c].astype(np.float32))
        if c1 in biases:
            ed.replace(by_name[c1], 2, biases[c1].astype(np.float32))
        how = kind
        group = [c1, c2] + ([act] if act else [])
        if kind == "relu6":
            hi = _clip_bounds(by_name[act], constant_arrays(m.graph))[1]
            group += _per_channel_clip(m, ed, by_name[act], hi / s)
            how = f"ReLU6 -> Relu + Min(per-channel bound {hi:g}/s)"
        changes[f"{c1} -> {c2}"] = (f"{kind}: s in [{s.min():.3g}, {s.max():.3g}]; {how}")
        groups.append(tuple(group))
    log.info("equalization: %d pairs equalized, %d skipped", len(changes), len(skipped))
    return m, StepRecord("equalization", {"relu6": relu6, "iterations": int(iterations),
                                          "activation_aware": activation_absmax is not None,
                                          "alpha": float(alpha)},
                         changes, skipped, tuple(groups))


def _input_channel_absmax(w2: np.ndarray, group: int) -> np.ndarray:
    """max |W2[o, i]| over output channels o that read input channel i (grouped conv)."""
    o, cg = w2.shape[0], w2.shape[1]
    og = o // group
    a = np.abs(w2.reshape(group, og, cg, -1)).max(axis=(1, 3))  # [group, cg]
    return a.reshape(-1)


def _scale_input_channels(w2: np.ndarray, s: np.ndarray, group: int) -> np.ndarray:
    o, cg = w2.shape[0], w2.shape[1]
    og = o // group
    ss = s.reshape(group, 1, cg)  # [group, 1, cg]
    shaped = w2.reshape(group, og, cg, -1) * ss[..., None]
    return shaped.reshape(w2.shape)


def _per_channel_clip(m: onnx.ModelProto, ed: InitializerEditor, clip: onnx.NodeProto,
                      bound: np.ndarray) -> list[str]:
    """Replace ``Clip(x, 0, c)`` by ``Min(Relu(x), bound[C,1,1])`` (same output name);
    returns the names of the two new nodes."""
    x, y = clip.input[0], clip.output[0]
    mid = ed.fresh_tensor(f"{y}__relu")
    b = ed.add(f"{clip.name}__bound", bound.astype(np.float32).reshape(-1, 1, 1))
    relu = helper.make_node("Relu", [x], [mid], name=ed.fresh_node(f"{clip.name}__Relu"))
    mn = helper.make_node("Min", [mid, b], [y], name=ed.fresh_node(f"{clip.name}__Min"))
    nodes = m.graph.node
    idx = next(i for i, n in enumerate(nodes) if n is clip or n.name == clip.name)
    del nodes[idx]
    nodes.insert(idx, mn)
    nodes.insert(idx, relu)
    return [relu.name, mn.name]
