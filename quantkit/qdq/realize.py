"""A Plan written into a graph, one way for every candidate: Q/DQ in front of every quantized
node (INT8 or FP8, one writer: ``insert.py``), then the remainder precision.

    graph = realize(model, plan, how, numerics="emulated")   # what a candidate computes
    qdq, qmap = quantize(model, plan, how)                     # the artifact's two steps:
    deployed = finish(qdq, plan, how, numerics="deployed")     # FP16 as TensorRT runs it

``numerics``: ``deployed`` converts the FP16-planned nodes to float16 (the artifact);
``emulated`` keeps FP32 compute with FP16 rounding at every FP16 tensor (what ONNX Runtime
CPU evaluates faithfully: it has no FP16 kernels for most ops); ``fp32_rest`` leaves every
node out of the quantized formats in FP32 (the search's per-layer damage). A plan whose
remainder is FP32 is finished as it is in every mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import onnx

from quantkit.graph.facts import TensorInfo
from quantkit.precision.plan import Plan
from quantkit.qdq.casts import convert_fp16, emulate_fp16
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.qdq_map import QdqMap

__all__ = ["Numerics", "Realization", "finish", "quantize", "realize"]

Numerics = Literal["deployed", "emulated", "fp32_rest"]


@dataclass(frozen=True)
class Realization:
    """How a Plan becomes a graph: the deployment target's Q/DQ layout (``tensorrt`` |
    ``ort_cpu``), the remainder precision (``fp16`` | ``fp32``), the Q/DQ scales' dtype
    (``fp32`` | ``fp16``, for plans that quantize) and whether weights are stored quantized
    behind one DequantizeLinear (``int8_weights``; FP8 weights always are)."""

    target: str
    remainder: str
    qdq_scale_dtype: str = "fp32"
    int8_weights: bool = False


def quantize(model: onnx.ModelProto, plan: Plan, how: Realization, *,
             infos: Mapping[str, TensorInfo] | None = None
             ) -> tuple[onnx.ModelProto, QdqMap | None]:
    """``model`` with Q/DQ in front of every quantized node of ``plan`` and its QdqMap;
    ``model`` itself (and no map) when the plan quantizes nothing. ``infos``: ``model``'s
    tensor facts when known."""
    if not plan.quantized_nodes():
        return model, None
    return insert_qdq(model, plan, target=how.target, infos=infos,
                      int8_weights=how.int8_weights)


def finish(model: onnx.ModelProto, plan: Plan, how: Realization, *, numerics: Numerics,
           infos: Mapping[str, TensorInfo] | None = None) -> onnx.ModelProto:
    """The remainder of ``model`` (a graph :func:`quantize` returned) in ``numerics``;
    ``infos``: its tensor facts when it is the unedited graph."""
    if how.remainder != "fp16" or numerics == "fp32_rest":
        return model
    scales = how.qdq_scale_dtype if plan.quantized_nodes() else "fp32"  # scales of Q/DQ only
    if numerics == "deployed":
        return convert_fp16(model, plan, infos=infos, qdq_scale_dtype=scales)
    if not plan.nodes_with("fp16"):
        return model
    return emulate_fp16(model, plan, infos=infos, qdq_scale_dtype=scales)


def realize(model: onnx.ModelProto, plan: Plan, how: Realization, *, numerics: Numerics,
            infos: Mapping[str, TensorInfo] | None = None) -> onnx.ModelProto:
    """``plan`` written into ``model``: :func:`quantize`, then :func:`finish` in
    ``numerics``. ``infos``: ``model``'s tensor facts when known."""
    edited, _ = quantize(model, plan, how, infos=infos)
    return finish(edited, plan, how, numerics=numerics,
                  infos=infos if edited is model else None)
