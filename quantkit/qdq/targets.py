"""Deployment targets: how one calibration and one Plan become Q/DQ in the graph.

The Plan (which nodes run INT8) and the calibrated ranges are the same for every target;
only the realization differs:

``tensorrt`` (default, TRT_RULES.md)
    signed symmetric INT8 activations (``scale = amax / 127``, zero point 0), per-channel
    symmetric INT8 weights, one Q/DQ pair per consumer, residual-Add skip inputs quantized
    (rule 6), the remainder in the configured precision (FP16 by default). Checked by the
    TensorRT lint (``qdq/lint.py``).

``ort_cpu`` (ONNX Runtime on x86 CPUs)
    what ONNX Runtime's x86 INT8 kernels run fast: **uint8 asymmetric activations**
    (MLAS's U8S8 / U8U8 GEMMs), per-channel symmetric INT8 weights, Conv / Gemm biases as
    int32 behind DequantizeLinear (scale = activation scale x weight scale: ORT fuses
    DQ -> Conv -> Q into QLinearConv only then), **one QuantizeLinear per quantized tensor
    shared by all its readers and one DequantizeLinear per reader** (ORT's own QDQ layout:
    every quantized MatMul fuses into ``MatMulIntegerToFloat`` / ``QLinearMatMul`` and a
    producer can fuse its output Q), and, for CNNs, **quantized Conv outputs**: ORT CPU has
    no INT8 Conv with float output, so an INT8 Conv's output (past a single-reader Relu /
    Clip, which ORT folds into the uint8 Q range) gets one Q and every reader a DQ:
    DQ -> Conv -> Q fuses into QLinearConv and uint8 flows from layer to layer. A float Add
    of two quantized tensors (the residual Add) and a GlobalAveragePool of a quantized tensor
    get their output quantized too (QLinearAdd, QLinearGlobalAveragePool). The ranges of
    those outputs come from the same calibration pass
    (``qdq.placement.ort_cpu_output_tensors`` lists them). No TensorRT residual-skip pairs, and
    an **FP32 remainder** (ORT CPU has no fast FP16 kernels: it wraps FP16 ops in Casts).
    Checked by :func:`lint_ort_cpu`.

The uint8 range of an activation is the calibrated symmetric clip ``[-amax, amax]``
intersected with the signed range observed during calibration
(``[max(min, -amax), min(max, amax)]``), widened to contain 0 so that 0 is exact:
``scale = (hi - lo) / 255``, ``zero_point = round(-lo / scale)``. A post-Softmax tensor
([0, 1]) therefore gets all 256 levels instead of the 128 non-negative levels of
symmetric INT8. numpy only, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from quantkit.errors import ConfigError, GraphEditError

__all__ = ["TARGETS", "DEFAULT_TARGET", "Target", "get_target", "uint8_qparams",
           "activation_ranges", "UINT8_MAX"]

#: Largest uint8 code (asymmetric activations of target ort_cpu).
UINT8_MAX = 255


@dataclass(frozen=True)
class Target:
    """How a Plan is written into the graph for one deployment target."""

    name: str
    #: "int8" (signed symmetric, zero point 0) or "uint8" (asymmetric, zero point from range)
    activation_dtype: str
    #: quantize residual-Add skip inputs after INT8 Convs (TRT rule 6)
    residual_add: bool
    #: Conv / Gemm biases as int32 behind DequantizeLinear (ORT's QLinearConv fusion needs it)
    quantize_bias: bool
    #: one Q per quantized tensor shared by its readers; quantized Conv / residual-Add /
    #: GlobalAveragePool outputs (ORT's QLinearConv / QLinearAdd chains)
    fuse_outputs: bool
    #: the remainder precision this target forces (None: precision.remainder decides)
    forced_remainder: str | None
    #: which rule set checks the artifact: "tensorrt" (qdq/lint.py) or "ort_cpu"
    lint: str
    #: where the numbers of this target's artifacts are meaningful
    runtime: str
    description: str


_TARGETS = {
    "tensorrt": Target(
        name="tensorrt", activation_dtype="int8", residual_add=True, quantize_bias=False,
        fuse_outputs=False, forced_remainder=None,
        lint="tensorrt", runtime="TensorRT",
        description="TensorRT explicit quantization (TRT_RULES.md): symmetric INT8 "
                    "activations and per-channel weights, one Q/DQ pair per consumer"),
    "ort_cpu": Target(
        name="ort_cpu", activation_dtype="uint8", residual_add=False, quantize_bias=True,
        fuse_outputs=True, forced_remainder="fp32",
        lint="ort_cpu", runtime="ONNX Runtime CPU",
        description="ONNX Runtime x86 CPU: uint8 asymmetric activations, per-channel "
                    "symmetric INT8 weights, one Q per tensor and one DQ per reader, "
                    "quantized Conv / residual-Add outputs (QLinearConv / QLinearAdd chains), "
                    "FP32 remainder (ORT CPU has no fast FP16 kernels)"),
}

#: Deployment targets, default first.
TARGETS = tuple(_TARGETS)
DEFAULT_TARGET = "tensorrt"


def get_target(name: str | Target) -> Target:
    """The :class:`Target` called ``name``; ConfigError naming the valid ones otherwise."""
    if isinstance(name, Target):
        return name
    try:
        return _TARGETS[str(name)]
    except KeyError:
        raise ConfigError(f"config key target must be one of {list(TARGETS)}", value=name,
                          fix="set target=tensorrt (TensorRT) or target=ort_cpu "
                              "(ONNX Runtime on x86 CPUs)") from None


def uint8_qparams(amax: float, lo: float | None, hi: float | None, *,
                  bounds: tuple[float, float] | None = None,
                  where: str = "qdq.targets") -> tuple[np.ndarray, np.ndarray]:
    """(float32 scale, uint8 zero point), both 0-d, for an asymmetric uint8 activation.

    ``amax`` is the calibrator's symmetric clip; ``lo`` / ``hi`` the signed min / max seen
    during calibration (None: unknown, then ``[-amax, amax]``). The range is
    ``[max(lo, -amax), min(hi, amax)]`` widened to contain 0. A degenerate range (an
    all-zero tensor) gets scale ``1 / 255`` and zero point 0.

    ``bounds``: the ``[min, max]`` of a Clip / Relu that produced the tensor. The range is
    cut to it and the float32 scale rounded down until the representable range
    ``[-zp * scale, (255 - zp) * scale]`` lies inside it: only then does ONNX Runtime fold
    the Clip / Relu into the QuantizeLinear (ClipQuantFusion / ReluQuantFusion) and fuse the
    Conv before it into QLinearConv.
    """
    a = float(amax)
    if not math.isfinite(a) or a < 0:
        raise GraphEditError("amax must be finite and >= 0", where=where, value=amax,
                             fix="exclude tensors with non-finite values from INT8 or recalibrate")
    lo_f = -a if lo is None else max(float(lo), -a)
    hi_f = a if hi is None else min(float(hi), a)
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise GraphEditError("activation min / max must be finite", where=where,
                             value=(lo, hi), fix="recalibrate; non-finite tensors stay float")
    if bounds is not None:
        lo_f, hi_f = max(lo_f, float(bounds[0])), min(hi_f, float(bounds[1]))
        hi_f = max(hi_f, lo_f)
    lo_f, hi_f = min(lo_f, 0.0), max(hi_f, 0.0)
    if hi_f - lo_f <= 0.0:
        return np.array(1.0 / UINT8_MAX, dtype=np.float32), np.array(0, dtype=np.uint8)
    scale = np.float32((hi_f - lo_f) / UINT8_MAX)
    zp = int(np.clip(np.rint(-lo_f / float(scale)), 0, UINT8_MAX))
    if bounds is not None:
        b_lo, b_hi = np.float32(bounds[0]), np.float32(bounds[1])
        for _ in range(64):  # float32 rounding of the scale can overshoot by a few ulps
            if (np.float32(UINT8_MAX - zp) * scale <= b_hi
                    and np.float32(-zp) * scale >= b_lo):
                break
            scale = np.nextafter(scale, np.float32(0.0))
    return np.array(scale, dtype=np.float32), np.array(zp, dtype=np.uint8)


def activation_ranges(summary: Mapping[str, Mapping]) -> dict[str, tuple[float, float]]:
    """tensor -> (min, max) from a calibration summary (``Ranges.summary``).

    Tensors whose summary lacks a finite min or max are left out (the realization then
    falls back to ``[-amax, amax]``).
    """
    out: dict[str, tuple[float, float]] = {}
    for t, s in summary.items():
        lo, hi = s.get("min"), s.get("max")
        if lo is None or hi is None:
            continue
        lo, hi = float(lo), float(hi)
        if math.isfinite(lo) and math.isfinite(hi):
            out[t] = (lo, hi)
    return out
