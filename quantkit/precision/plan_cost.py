"""A candidate's estimated GEMM time on the target GPU: each GEMM-like node of its Plan costed
in its format (``cost.estimate_layer``), summed. Pure functions over a graph's facts; no I/O.

What it is: the time of the layers whose cost depends on the format (MatMul, Gemm, Conv,
ConvTranspose) at one representative shape, every symbolic dimension replaced (the first by
the batch, the others by the text length), FP32 GEMMs at half the FP16 rate (TF32's dense
peak is half FP16's on Ampere and Hopper). What it is not: an engine's latency. It ranks
candidates where TensorRT is not there to time them, and is labelled ``estimated on <GPU>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from quantkit.graph.facts import TensorInfo, constant_tensors
from quantkit.precision.cost import estimate_layer
from quantkit.precision.cost_table import GEMM_OPS
from quantkit.precision.gpus import GpuTarget, resolve_gpu
from quantkit.precision.plan import Plan

__all__ = ["PlanEstimate", "gemm_shapes", "estimate_plan"]


@dataclass(frozen=True)
class PlanEstimate:
    """``ms``: the summed GEMM time; ``by_format``: ms per format; ``label``: "estimated on
    <GPU>"; ``basis``: where the ratios come from; ``shape``: the batch and length used."""

    ms: float
    by_format: dict[str, float]
    label: str
    basis: str
    shape: str

    def to_dict(self) -> dict:
        return {"ms": round(self.ms, 6), "by_format": {k: round(v, 6)
                                                      for k, v in self.by_format.items()},
                "label": self.label, "basis": self.basis, "shape": self.shape}


def _dims(shape, batch: int, length: int) -> list[int] | None:
    if shape is None:
        return None
    return [d if isinstance(d, int) and d > 0 else (batch if i == 0 else length)
            for i, d in enumerate(shape)]


def _shape_of(name: str, infos: Mapping[str, TensorInfo], consts: Mapping,
              batch: int, length: int) -> list[int] | None:
    if name in consts:
        return list(consts[name].dims)
    info = infos.get(name)
    return _dims(info.shape if info is not None else None, batch, length)


def gemm_shapes(model: onnx.ModelProto, infos: Mapping[str, TensorInfo], *, batch: int,
                length: int) -> dict[str, tuple[str, tuple[int, int, int]]]:
    """GEMM-like node -> (op, (M, K, N)) at ``batch`` and ``length``; nodes whose shapes
    shape inference could not name are left out."""
    consts = constant_tensors(model.graph)
    out = {}
    for node in model.graph.node:
        if node.op_type not in GEMM_OPS or len(node.input) < 2:
            continue
        y = _shape_of(node.output[0], infos, consts, batch, length)
        a = _shape_of(node.input[0], infos, consts, batch, length)
        w = _shape_of(node.input[1], infos, consts, batch, length)
        if not y or not a or not w:
            continue
        if node.op_type in ("MatMul", "Gemm"):
            n = y[-1]
            k = a[-1] if node.op_type == "MatMul" else (
                a[0] if any(t.name == "transA" and t.i for t in node.attribute) else a[-1])
            m = math.prod(y) // max(n, 1)
        else:  # Conv [M, C/g, k...]; ConvTranspose [C, M/g, k...]
            n = y[1] if len(y) > 1 else 1
            k = math.prod(w[1:])
            m = math.prod(y) // max(n, 1)
        out[node.name] = (node.op_type, (int(m), int(k), int(n)))
    return out


def estimate_plan(plan: Plan, shapes: Mapping[str, tuple[str, tuple[int, int, int]]],
                  gpu: int | str | GpuTarget, *, shape: str) -> PlanEstimate:
    """The Plan's GEMM time on ``gpu``: each node of ``shapes`` in its plan format."""
    g = gpu if isinstance(gpu, GpuTarget) else resolve_gpu(gpu)
    by_format: dict[str, float] = {}
    bases, label = set(), ""
    for name, (op, mkn) in shapes.items():
        if name not in plan.decisions:
            continue
        fmt = plan.decisions[name].precision.value
        est = estimate_layer(2.0 * math.prod(mkn), "fp16" if fmt == "fp32" else fmt, g, op=op,
                             mkn=mkn)
        ms = est.time_ms * (2.0 if fmt == "fp32" else 1.0)
        by_format[fmt] = by_format.get(fmt, 0.0) + ms
        bases.add(est.basis.split(" GEMM ")[0])
        label = est.label
    basis = " and ".join(sorted(bases)) or "no GEMM with a known shape"
    return PlanEstimate(sum(by_format.values()), by_format, label or f"estimated on {g.label}",
                        basis, shape)
