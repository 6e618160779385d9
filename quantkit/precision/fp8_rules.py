"""Which quantized nodes TensorRT runs in FP8 E4M3: GEMMs, and convolutions of a shape that
has FP8 kernels. A node this rejects stays in the remainder precision in FP8 plans.

- TensorRT runs FP8 in matrix multiplications (MatMul / Gemm) and convolutions, lowered to
  implicit GEMM (``graph.weights.FP8_CONSUMERS``; the lint's ``fp8-consumer`` rule and its source).
- A Conv runs FP8 only when its weight is constant, both of its channel counts (output
  channels ``W.shape[0]``, input channels per group ``W.shape[1]``) exceed
  :data:`FP8_MIN_CONV_CHANNELS` and its filter (the product of the kernel dims) has at most
  :data:`FP8_MAX_CONV_FILTER` taps. This is the rule NVIDIA's own ONNX PTQ applies before it
  writes FP8 Q/DQ for TensorRT: ModelOpt (nvidia-modelopt 0.47)
  ``modelopt/onnx/quantization/graph_utils.py``, ``find_nodes_from_convs_to_exclude(graph,
  quantize_mode="fp8")``: "The filter size for FP8 conv kernels should be less than 32";
  "Small-channel convolutions do not benefit from FP8 quantization and cause perf regressions
  on GPUs where the FP8 conv kernels are slower than FP16 CASK kernels for small channels"
  (``_MIN_CHANNELS_FP8 = 16``, excluded when a count is ``<= 16``). Depthwise convolutions
  (one input channel per group) are therefore never FP8: they are also where per-tensor E4M3
  loses most on BatchNorm-folded weights (measured: benchmarks/results/mobilenet_int8.md).

Numerics-free: reads op types and weight shapes only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import onnx

from quantkit.graph.weights import FP8_CONSUMERS

__all__ = ["FP8_MIN_CONV_CHANNELS", "FP8_MAX_CONV_FILTER", "fp8_exclusion", "fp8_exclusions"]

#: a Conv runs FP8 only with more than this many output and input (per group) channels
FP8_MIN_CONV_CHANNELS = 16
#: ... and at most this many filter taps (product of the kernel dims)
FP8_MAX_CONV_FILTER = 32


def fp8_exclusion(op_type: str, weight_shape: Sequence[int] | None) -> str | None:
    """Why TensorRT would not run a node of ``op_type`` with constant weight of
    ``weight_shape`` (None: not a constant) in FP8, or None when it would."""
    if op_type not in FP8_CONSUMERS:
        return "TensorRT runs FP8 in GEMMs and convolutions only"
    if op_type != "Conv":
        return None
    if weight_shape is None or len(weight_shape) < 3:
        return "a Conv runs FP8 with a constant weight only"
    oc, ic = int(weight_shape[0]), int(weight_shape[1])
    taps = math.prod(int(k) for k in weight_shape[2:])
    if taps > FP8_MAX_CONV_FILTER:
        return (f"Conv filter of {taps} taps: TensorRT's FP8 convolutions take at most "
                f"{FP8_MAX_CONV_FILTER} (ModelOpt's FP8 rule)")
    if oc <= FP8_MIN_CONV_CHANNELS or ic <= FP8_MIN_CONV_CHANNELS:
        kind = "depthwise Conv" if ic == 1 else "Conv"
        return (f"{kind} with {oc} output / {ic} input channels per group: FP8 needs more than "
                f"{FP8_MIN_CONV_CHANNELS} of each (small-channel FP8 kernels are slower than "
                "FP16; ModelOpt's FP8 rule)")
    return None


def fp8_exclusions(model: onnx.ModelProto, nodes: Sequence[str]) -> dict[str, str]:
    """node name -> why it stays out of FP8, for the ``nodes`` of ``model`` that
    :func:`fp8_exclusion` rejects (nodes named as ``graph.facts.node_names`` names them)."""
    from quantkit.graph.facts import constant_tensors, node_names

    graph = model.graph
    shapes: Mapping[str, tuple[int, ...]] = {n: tuple(t.dims)
                                             for n, t in constant_tensors(graph).items()}
    by_name = dict(zip(node_names(graph), graph.node))
    out = {}
    for n in nodes:
        node = by_name.get(n)
        if node is None:
            continue
        weight = node.input[1] if len(node.input) > 1 else ""
        why = fp8_exclusion(node.op_type, shapes.get(weight))
        if why is not None:
            out[n] = why
    return out
