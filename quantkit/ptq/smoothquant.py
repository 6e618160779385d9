"""SmoothQuant-style activation-to-weight scale migration for MatMul / Gemm inputs.

For an activation ``x`` [..., K] read by MatMul / Gemm nodes with constant weights, with
per-channel max-abs ``a_j`` (calibration) and weight max-abs ``w_j`` over the K-row j of
every such reader, ``s_j = a_j**alpha / w_j**(1 - alpha)``; ``x / s`` is quantized and each
weight gets ``s`` multiplied into its K rows, so ``(x / s) @ (s W) = x @ W``: the FP32
function is unchanged (to float rounding) and the outlier channels' range moves into the
weights, which are quantized per output channel.

Where ``1 / s`` goes: into the producing LayerNormalization's scale and bias when every
reader of ``x`` is a smoothed MatMul / Gemm (a pure constant fold); else into one new
constant ``Mul`` that only the smoothed readers read (a residual Add keeps reading ``x``).

Call on the FP32 graph **before calibration** (the smoothed tensors are what gets
calibrated): ``smoothable_inputs`` -> ``ptq.capture.channel_stats(..., axis=-1)`` ->
``smooth_activations``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper

from quantkit.errors import ConfigError
from quantkit.graph.facts import producers
from quantkit.ptq.graphutil import reader_weights
from quantkit.ptq.input_rewrite import InputRewrite, smoothable_inputs
from quantkit.ptq.step_record import StepRecord

log = logging.getLogger(__name__)

__all__ = ["smoothable_inputs", "smooth_activations"]

#: scales are clipped into this range (a dead channel would otherwise give 0 or inf)
_SCALE_LIMITS = (1e-4, 1e4)


def smooth_activations(model: onnx.ModelProto, channel_absmax: Mapping[str, np.ndarray], *,
                       alpha: float = 0.5, min_outlier_ratio: float = 0.0,
                       nodes: Iterable[str] | None = None
                       ) -> tuple[onnx.ModelProto, StepRecord]:
    """A copy of ``model`` with scales migrated for every smoothable input that has
    ``channel_absmax`` (per channel on the last axis, from calibration data).

    ``min_outlier_ratio``: smooth a tensor only if max / median of its channel max-abs is at
    least this (0 smooths every one). Returns the model and what was changed.
    """
    if not 0.0 <= float(alpha) <= 1.0:
        raise ConfigError("SmoothQuant alpha must be in [0, 1]", where="ptq.smoothquant.alpha",
                          value=alpha, fix="use e.g. 0.5 (SmoothQuant's default)")
    rw = InputRewrite(model, nodes=nodes)
    ed, by_name, skipped = rw.editor, rw.by_name, rw.skipped
    prod = producers(rw.model.graph)
    for x, names in rw.groups.items():
        if x not in channel_absmax:
            skipped[x] = "no per-channel statistics"
            continue
        a = np.asarray(channel_absmax[x], dtype=np.float64).reshape(-1)
        readers = [by_name[n] for n in names]
        found = reader_weights(ed, readers, a.size)
        if isinstance(found, str):
            skipped[x] = found
            continue
        ws, axes = found
        ratio = float(a.max() / max(np.median(a), 1e-12))
        if ratio < min_outlier_ratio:
            skipped[x] = f"outlier ratio {ratio:.1f} < {min_outlier_ratio}"
            continue
        wmax = np.max([np.max(np.abs(w), axis=1 - ax) for w, ax in zip(ws, axes)], axis=0)
        s = (np.maximum(a, 1e-8) ** alpha) / (np.maximum(wmax, 1e-8) ** (1.0 - alpha))
        s = np.clip(s, *_SCALE_LIMITS)
        for r, w, ax in zip(readers, ws, axes):
            shape = [1, 1]
            shape[ax] = -1
            ed.replace(r, 1, w * s.reshape(shape))
        p = prod.get(x)
        all_readers = {r.name for r in ed.readers.get(x, [])}
        if (p is not None and p.op_type == "LayerNormalization" and len(p.input) >= 2
                and p.output[0] == x and x not in rw.outputs and all_readers == set(names)
                and all(ed.is_initializer(t) for t in p.input[1:3] if t)):
            for slot in (1, 2):
                if len(p.input) > slot and p.input[slot]:
                    v = ed.array(p.input[slot])
                    ed.replace(p, slot, v / s.reshape(v.shape) if v.size == s.size else v / s)
            how = f"folded 1/s into LayerNormalization {p.name}"
            rw.rewrites.append((p.name, *names))
        else:
            inv = ed.add(f"{x}__smooth_inv_scale", (1.0 / s).astype(np.float32))
            y = ed.fresh_tensor(f"{x}__smoothed")
            mul = helper.make_node("Mul", [x, inv], [y], name=ed.fresh_node(f"{x}__smooth_Mul"))
            for r in readers:
                r.input[0] = y
            rw.insert_before(mul, names)
            rw.rewrites.append((mul.name, *names))
            how = "1/s in a new constant Mul"
        rw.changes[x] = (f"scaled {len(names)} reader(s) ({', '.join(names[:3])}"
                         f"{' ...' if len(names) > 3 else ''}); {how}; outlier ratio "
                         f"{ratio:.1f}; s in [{s.min():.3g}, {s.max():.3g}]")
    log.info("smoothquant: %d tensors smoothed, %d skipped", len(rw.changes), len(skipped))
    return rw.finish("smoothquant", {"alpha": float(alpha),
                                     "min_outlier_ratio": float(min_outlier_ratio)})
