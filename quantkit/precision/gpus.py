"""Which quantized formats a target GPU runs: compute capability (``gpu.sm``) -> formats.

One table maps GPU names to their compute capability (source: NVIDIA's CUDA GPU list,
https://developer.nvidia.com/cuda-gpus, "Compute Capability"). Formats per capability:

* INT8 on every GPU quantkit supports (sm 75 Turing and later: INT8 Tensor Cores; TensorRT 10
  supports sm 75+).
* FP8 E4M3 from sm 89 (Ada, Hopper, Blackwell). Source: TensorRT-RTX "Working with Quantized
  Types": "FP8 is only supported for matrix multiplications (GEMM) on Ada and later
  architectures (compute capability 8.9 or later)"
  (https://docs.nvidia.com/deeplearning/tensorrt-rtx/latest/inference-library/work-quantized-types.html);
  Torch-TensorRT's quantization guide lists FP8 for Hopper or newer.

:func:`check_formats` refuses a format the target cannot run with one ConfigError naming the
target and the format. Pure functions and constant tables; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from quantkit.errors import ConfigError

__all__ = ["GpuTarget", "GPU_SM", "SM_ARCH", "FORMATS", "MIN_SM", "FP8_MIN_SM",
           "resolve_gpu", "formats_for", "check_formats", "GPU_SOURCE"]

#: quantized formats quantkit writes (``precision.formats``)
FORMATS = ("int8", "fp8")
#: oldest compute capability with INT8 Tensor Cores that TensorRT 10 supports (Turing)
MIN_SM = 75
#: first compute capability with FP8 E4M3 Tensor Cores (Ada)
FP8_MIN_SM = 89
GPU_SOURCE = "https://developer.nvidia.com/cuda-gpus (compute capability per GPU)"

#: GPU name (upper case) -> compute capability as an integer (8.9 -> 89)
GPU_SM = {
    "T4": 75, "A100": 80, "A30": 80, "A10": 86, "A40": 86, "RTX3090": 86, "ORIN": 87,
    "L4": 89, "L40": 89, "L40S": 89, "RTX4090": 89, "H100": 90, "H200": 90, "GH200": 90,
    "B200": 100, "GB200": 100, "RTX5090": 120, "RTXPRO6000": 120,
}

#: compute capability -> architecture name (the cost table is keyed by architecture)
SM_ARCH = {75: "turing", 80: "ampere", 86: "ampere", 87: "ampere", 89: "ada", 90: "hopper",
           100: "blackwell", 120: "blackwell"}


@dataclass(frozen=True)
class GpuTarget:
    """A target GPU: its compute capability, architecture and the name it was given."""

    sm: int
    arch: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.name} (sm {self.sm})" if self.name != f"sm{self.sm}" else f"sm {self.sm}"


def resolve_gpu(value: int | str, *, where: str = "gpu.sm") -> GpuTarget:
    """``90``, ``"90"``, ``"9.0"`` or a GPU name (``"H100"``, case-insensitive) -> GpuTarget.
    An unknown name or capability is one ConfigError listing the known ones."""
    raw = str(value).strip()
    key = raw.upper().replace(" ", "").replace("-", "")
    if key in GPU_SM:
        sm, name = GPU_SM[key], key
    else:
        try:
            sm = int(round(float(raw) * 10)) if "." in raw else int(raw)
        except ValueError:
            raise ConfigError("unknown target GPU", where=where, value=value,
                              fix=f"use a compute capability ({', '.join(map(str, SM_ARCH))}) "
                                  f"or a GPU name ({', '.join(GPU_SM)})") from None
        name = f"sm{sm}"
    if sm not in SM_ARCH:
        raise ConfigError("unsupported target compute capability", where=where, value=value,
                          fix=f"use one of {', '.join(map(str, SM_ARCH))} (sm {MIN_SM}+: "
                              "INT8 Tensor Cores) or a GPU name")
    return GpuTarget(sm, SM_ARCH[sm], name)


def formats_for(gpu: GpuTarget) -> tuple[str, ...]:
    """The quantized formats ``gpu`` runs: int8 everywhere, fp8 from sm 89."""
    return ("int8", "fp8") if gpu.sm >= FP8_MIN_SM else ("int8",)


def check_formats(gpu: int | str | GpuTarget | None, requested: Iterable[str], *,
                  where: str = "precision.formats") -> tuple[str, ...]:
    """``requested`` (deduplicated, in order) when the target runs every one of them; else one
    ConfigError naming the target and the format. ``gpu`` None (not stated) runs int8 only:
    FP8 needs the target stated."""
    req = tuple(dict.fromkeys(str(f).lower() for f in requested))
    if not req:
        raise ConfigError("no quantized format requested", where=where, value=list(req),
                          fix="e.g. precision.formats=[int8]")
    for f in req:
        if f not in FORMATS:
            raise ConfigError("unknown quantized format", where=where, value=f,
                              fix=f"use formats from {list(FORMATS)}")
    if gpu is None:
        if "fp8" in req:
            raise ConfigError("format fp8 needs a target GPU with FP8 (sm 89+); none is set",
                              where="gpu.sm", value=None,
                              fix="set gpu.sm (e.g. gpu.sm=90 or gpu.sm=H100), or "
                                  "precision.formats=[int8]")
        return req
    target = gpu if isinstance(gpu, GpuTarget) else resolve_gpu(gpu)
    have = formats_for(target)
    for f in req:
        if f not in have:
            raise ConfigError(f"target GPU {target.label} cannot run format {f} "
                              f"({f} needs sm {FP8_MIN_SM}+)", where=where, value=f,
                              fix=f"drop {f} (precision.formats={list(have)}) or target a "
                                  f"GPU with sm >= {FP8_MIN_SM} (L4, L40S, H100, H200, B200)")
    return req
