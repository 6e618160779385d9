"""Estimated layer time per format on a target GPU, from the cost table (``cost_table.py``).

Used where TensorRT is not there to time an engine: every figure is an *estimate* and carries
its label, ``estimated on <GPU>``, and its basis (an H200 measurement of the nearest GEMM
shape, or the published peak ratio). GEMM-like ops (MatMul, Gemm, Conv, ConvTranspose) scale
with the format's Tensor Core throughput; the FP16 throughput is the measured one on Hopper,
else the GPU's dense FP16 peak. Pure functions; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quantkit.errors import ConfigError
from quantkit.precision.cost_table import (ARCH_GPU, FP16_PEAK_TFLOPS, GEMM_OPS, MEASURED_H200,
                                           PEAK_RATIO)
from quantkit.precision.gpus import GpuTarget, formats_for, resolve_gpu

__all__ = ["LayerEstimate", "relative_throughput", "estimate_layer"]

_FORMATS = ("fp16", "int8", "fp8")


@dataclass(frozen=True)
class LayerEstimate:
    """One layer's estimated time in one format, with where the number comes from."""

    time_ms: float
    format: str
    gpu: str
    basis: str  # "measured H200 GEMM MxKxN" | "published peak ratio"

    @property
    def label(self) -> str:
        return f"estimated on {self.gpu}"


def _gpu(target: int | str | GpuTarget) -> GpuTarget:
    return target if isinstance(target, GpuTarget) else resolve_gpu(target, where="cost target")


def _check(g: GpuTarget, op: str, fmt: str) -> None:
    if fmt not in _FORMATS:
        raise ConfigError("unknown format for the cost model", where="cost", value=fmt,
                          fix=f"use one of {list(_FORMATS)}")
    if fmt != "fp16" and fmt not in formats_for(g):
        raise ConfigError(f"target GPU {g.label} cannot run format {fmt}", where="cost",
                          value=fmt, fix=f"use one of {['fp16', *formats_for(g)]}")
    if op not in GEMM_OPS:
        raise ConfigError("the cost model covers GEMM-like ops only", where="cost", value=op,
                          fix=f"use one of {sorted(GEMM_OPS)}")


def _nearest_measured(mkn: tuple[int, int, int] | None):
    """The measured (M, K, N) nearest ``mkn`` in log distance over all three dimensions (a
    4096 x 3072 x 768 GEMM is nearer 32768 x 3072 x 768 than 4096 x 768 x 3072, whose
    FLOPs it shares)."""
    if mkn is None:
        return None
    return min(MEASURED_H200, key=lambda s: sum(abs(math.log(max(a, 1) / max(b, 1)))
                                                for a, b in zip(s, mkn)))


def relative_throughput(target: int | str | GpuTarget, op: str, fmt: str, *,
                        mkn: tuple[int, int, int] | None = None) -> float:
    """Throughput of ``fmt`` relative to FP16 for ``op`` on ``target``: the H200 measurement
    of the GEMM shape nearest ``mkn`` (M x K x N, log distance) on Hopper, else the published peak ratio.
    An unknown target, op or format, or one the target cannot run, is a ConfigError."""
    g = _gpu(target)
    _check(g, op, fmt)
    shape = _nearest_measured(mkn) if g.arch == "hopper" else None
    if shape is not None:
        row = MEASURED_H200[shape]
        return row[fmt] / row["fp16"]
    return PEAK_RATIO[g.arch][fmt]


def estimate_layer(flops: float, fmt: str, target: int | str | GpuTarget, *,
                   op: str = "MatMul", mkn: tuple[int, int, int] | None = None) -> LayerEstimate:
    """Estimated time of a layer of ``flops`` (2 x M x K x N for a GEMM) in ``fmt``."""
    if not (isinstance(flops, (int, float)) and math.isfinite(flops) and flops >= 0):
        raise ConfigError("layer FLOPs must be a finite number >= 0", where="cost", value=flops,
                          fix="pass 2 * M * K * N for a GEMM")
    g = _gpu(target)
    rel = relative_throughput(g, op, fmt, mkn=mkn)
    shape = _nearest_measured(mkn) if g.arch == "hopper" else None
    name = g.name if g.name in FP16_PEAK_TFLOPS else ARCH_GPU[g.arch]
    if shape is not None:
        fp16_tflops, basis = MEASURED_H200[shape]["fp16"], \
            f"measured H200 GEMM {'x'.join(map(str, shape))}"
        name = g.name if g.name in ("H100", "H200") else "H200"
    else:
        fp16_tflops, basis = FP16_PEAK_TFLOPS[name], "published peak ratio"
    time_ms = flops / (fp16_tflops * rel * 1e12) * 1e3
    return LayerEstimate(time_ms, fmt, name if g.name == name else f"{name} ({g.label})", basis)
