"""Per-channel scaling of a CNN's residual streams (SmoothQuant's migration, through the Adds).

A residual stream is the set of tensors residual ``Add`` nodes join: in MobileNetV2 the
projection Conv of each block and the Adds of one stage write ``[N, C, H, W]`` tensors of
the same C channels, and the next blocks' expansion Convs read them. Per-tensor INT8 of a
stream with a few channels 5-7x above the median (MobileNetV2's last stage on Fashion-MNIST:
SQNR 23 dB where the other tensors have 35-40) costs more than any other quantizer of the
network; cross-layer equalization cannot reach it (an Add sits between the Convs), nor can
SmoothQuant (it handles MatMul readers of one tensor).

With ``a_c`` the per-channel max-abs over every tensor of the stream (calibration data) and
``w_c`` the max-abs of input channel c over every reading Conv's weight,
``s_c = a_c**alpha / w_c**(1 - alpha)``, divided by its geometric mean (the stream keeps its
overall magnitude: FP16 sees the same range). Every Conv writing into the stream divides
output channel c's weight and bias by ``s_c``; every Conv reading it multiplies input
channel c of its weight by ``s_c``; Adds of scaled tensors are scaled tensors. Everything on
the way is linear, so the FP32 function is unchanged (to float rounding), and the stream's
per-tensor range is what the scaling made it.

A stream is scaled only when every tensor in it is written by a Conv with a constant weight
or by an Add of the stream, and read only by Adds of the stream or by ungrouped Convs (as
their data input), with no graph output among them; otherwise it is skipped with the reason.
Call on the FP32 graph **before calibration**: :func:`stream_tensors` -> channel statistics
(axis 1) -> :func:`scale_streams`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from quantkit.errors import ConfigError
from quantkit.graph.facts import attr, ensure_node_names, producers
from quantkit.ptq.graphutil import InitializerEditor, copy_model
from quantkit.ptq.restore import merge_groups
from quantkit.ptq.step_record import StepRecord

log = logging.getLogger(__name__)

__all__ = ["Stream", "find_streams", "stream_tensors", "scale_streams"]

_SCALE_LIMITS = (1e-3, 1e3)


@dataclass(frozen=True)
class Stream:
    """One residual stream: its tensors (graph order), the Convs that write into it, the
    Convs that read it, its Adds; ``reason`` is None when it can be scaled, else why not."""

    tensors: tuple[str, ...]
    writers: tuple[str, ...]
    readers: tuple[str, ...]
    adds: tuple[str, ...]
    reason: str | None

    @property
    def name(self) -> str:
        return self.tensors[-1]


def find_streams(model: onnx.ModelProto) -> list[Stream]:
    """Every set of tensors joined by two-input Adds of non-constant tensors, in graph order,
    with what writes and reads it (:class:`Stream`)."""
    ensure_node_names(model)
    g = model.graph
    ed = InitializerEditor(model)
    prod = producers(g)
    outputs = {o.name for o in g.output}
    adds = [n for n in g.node if n.op_type == "Add" and len(n.input) == 2
            and not any(ed.is_initializer(i) or i not in prod for i in n.input)]
    order = {t: i for i, t in enumerate(o for n in g.node for o in n.output)}
    comps = [sorted(c, key=lambda t: order.get(t, -1))
             for c in merge_groups([n.input[0], n.input[1], n.output[0]] for n in adds)]
    comps.sort(key=lambda c: order.get(c[0], -1))
    add_names = {n.name for n in adds}
    streams = []
    for tensors in comps:
        writers, readers, adds_of, why = [], [], [], []
        members = set(tensors)
        for t in tensors:
            p = prod[t]
            if p.op_type == "Add" and p.name in add_names:
                adds_of.append(p.name)
            elif _const_conv(p, ed):
                writers.append(p.name)
            else:
                why.append(f"{t} is written by {p.op_type} {p.name}")
            if t in outputs:
                why.append(f"{t} is a graph output")
            for r in ed.readers.get(t, []):
                if r.op_type == "Add" and r.name in add_names and set(r.input) <= members:
                    continue
                if (_const_conv(r, ed) and r.input[0] == t and int(attr(r, "group", 1)) == 1
                        and t not in r.input[1:]):
                    if r.name not in readers:
                        readers.append(r.name)
                    continue
                why.append(f"{t} is read by {r.op_type} {r.name}")
        if not why and not readers:
            why.append("no Conv reads the stream")
        streams.append(Stream(tuple(tensors), tuple(writers), tuple(readers), tuple(adds_of),
                              why[0] if why else None))
    return streams


def _const_conv(n: onnx.NodeProto, ed: InitializerEditor) -> bool:
    """A Conv whose weight (and bias, if any) are initializers read by this node only."""
    if n.op_type != "Conv" or len(n.input) < 2:
        return False
    consts = [i for i in n.input[1:3] if i]
    return all(ed.is_initializer(i) and len(ed.readers.get(i, [])) == 1
               and list(n.input).count(i) == 1 for i in consts)


def stream_tensors(model: onnx.ModelProto) -> list[str]:
    """The tensors of every scalable stream (their per-channel statistics on axis 1 are what
    :func:`scale_streams` reads)."""
    return [t for s in find_streams(model) if s.reason is None for t in s.tensors]


def scale_streams(model: onnx.ModelProto, channel_absmax: Mapping[str, np.ndarray], *,
                  alpha: float = 0.5) -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` with every scalable stream scaled (module doc), and the record:
    per stream the channel range before and after, per skipped stream the reason."""
    if not 0.0 <= float(alpha) <= 1.0:
        raise ConfigError("stream scaling alpha must be in [0, 1]",
                          where="ptq.stream_alpha", value=alpha,
                          fix="use e.g. 0.5 (SmoothQuant's default), or null for off")
    m = copy_model(model)
    streams = find_streams(m)
    ed = InitializerEditor(m)
    by_name = {n.name: n for n in m.graph.node}
    changes, skipped, groups = {}, {}, []
    for st in streams:
        if st.reason is not None:
            skipped[st.name] = st.reason
            continue
        stats = [np.asarray(channel_absmax[t], dtype=np.float64).reshape(-1)
                 for t in st.tensors if t in channel_absmax]
        if len(stats) != len(st.tensors):
            skipped[st.name] = "no per-channel statistics"
            continue
        a = np.max(stats, axis=0)
        w_in = [ed.array(by_name[r].input[1]) for r in st.readers]
        w_out = [ed.array(by_name[w].input[1]) for w in st.writers]
        if any(w.shape[1] != a.size for w in w_in) or any(w.shape[0] != a.size for w in w_out):
            skipped[st.name] = f"channel count {a.size} does not match the Convs' weights"
            continue
        wmax = np.max([np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != 1))
                       for w in w_in], axis=0).astype(np.float64)
        live = (a > 0) & (wmax > 0)
        if not live.any():
            skipped[st.name] = "every channel is zero"
            continue
        s = np.ones_like(a)
        s[live] = a[live] ** alpha / wmax[live] ** (1.0 - alpha)
        s[live] /= np.exp(np.mean(np.log(s[live])))
        s = np.clip(s, *_SCALE_LIMITS)
        for r in st.readers:
            n = by_name[r]
            w = ed.array(n.input[1])
            ed.replace(n, 1, w * s.reshape((1, -1) + (1,) * (w.ndim - 2)))
        for wname in st.writers:
            n = by_name[wname]
            w = ed.array(n.input[1])
            ed.replace(n, 1, w / s.reshape((-1,) + (1,) * (w.ndim - 1)))
            if len(n.input) > 2 and n.input[2]:
                ed.replace(n, 2, ed.array(n.input[2]) / s)
        before = float(a.max() / max(np.median(a), 1e-12))
        scaled = a / s
        after = float(scaled.max() / max(np.median(scaled), 1e-12))
        changes[st.name] = (f"{len(st.tensors)} tensors, {len(st.writers)} writer / "
                            f"{len(st.readers)} reader Convs; channel max / median "
                            f"{before:.1f} -> {after:.1f}; s in [{s.min():.3g}, {s.max():.3g}]")
        groups.append(st.writers + st.readers + st.adds)
    log.info("stream scaling: %d streams scaled, %d skipped", len(changes), len(skipped))
    return m, StepRecord("stream_scaling", {"alpha": float(alpha)}, changes, skipped,
                         tuple(groups))
