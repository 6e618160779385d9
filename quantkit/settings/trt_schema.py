"""backend.trt.* schema: TensorRT engine settings, their range checks and shape helpers."""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Optional

from quantkit.errors import ConfigError


#: Oldest TensorRT major version quantkit builds with (I/O tensor API, strongly typed networks).
TRT_MIN_MAJOR = 10


@dataclass
class TrtConfig:
    """TensorRT engine settings (``backend.trt.*``): the one schema for building, running and
    timing engines (``quantkit.backends.trt.EngineSettings`` is this class). Precision comes
    from the graph only.

    Shapes: the batch dim (axis 0) takes min/opt/max_batch; other dynamic dims of a text
    model take the sequence range, of an image model ``image_range`` (default: the run's
    ``data.image.size``), unless ``dim_overrides`` (by ONNX dim name, e.g. ``height``) or
    ``shape_overrides`` (by input name: ``[min_shape, opt_shape, max_shape]``) say otherwise.
    Validated on construction (one ConfigError naming ``backend.trt.<key>``).
    """

    workspace_mb: int = 4096
    min_batch: int = 1
    opt_batch: int = 32
    max_batch: int = 64
    min_sequence: int = 1
    opt_sequence: Optional[int] = 128
    max_sequence: Optional[int] = 128
    image_range: Optional[list[int]] = None  # [min, opt, max] of dynamic H/W dims of images
    dim_overrides: dict[str, list[int]] = field(default_factory=dict)
    shape_overrides: dict[str, list[list[int]]] = field(default_factory=dict)
    timing_cache: Optional[str] = None  # directory or file stem; keyed by TensorRT + GPU
    builder_optimization_level: int = 3
    tensorrt_major: Optional[int] = None  # 10 or 11 pins the major; null accepts any >= 10
    # TF32 for FP32-typed layers (TensorRT enables it by default; off here so "fp32" is FP32)
    tf32: bool = False
    cuda_graphs: bool = False  # latency: replay one captured CUDA graph per input shape
    # one more optimization profile per bench batch size (batch fixed there, TensorRT tunes for
    # it); profile 0 stays the general one every other stage runs on
    latency_profiles: bool = False
    rebuild: bool = False
    device: int = 0  # CUDA device index: build, run and time on it

    def __post_init__(self) -> None:
        check_trt_config(self)


def _trt_shape(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError("a shape must be a list of integers", where=where, value=value,
                          fix="write it like [1, 128]")
    dims = list(value)
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
        raise ConfigError("a shape must be a list of integers", where=where, value=value,
                          fix="write it like [1, 128]")
    return tuple(int(d) for d in dims)


def _trt_range(value: Any, where: str) -> tuple[int, int, int]:
    rng = _trt_shape(value, where)
    if len(rng) != 3 or not 1 <= rng[0] <= rng[1] <= rng[2]:
        raise ConfigError("a dimension range must be [min, opt, max] with 1 <= min <= opt <= max",
                          where=where, value=value, fix="e.g. [1, 128, 512]")
    return rng  # type: ignore[return-value]


def check_trt_config(t: TrtConfig) -> None:
    """Range checks of ``backend.trt``; normalizes shapes to int tuples. ConfigError (one line)."""
    def positive(name: str, *, allow_zero: bool = False) -> None:
        value = getattr(t, name)
        if (not isinstance(value, int) or isinstance(value, bool)
                or value < (0 if allow_zero else 1)):
            raise ConfigError(f"backend.trt.{name} must be a {'non-negative' if allow_zero else 'positive'} "
                              "integer", where=f"backend.trt.{name}", value=value,
                              fix=f"e.g. backend.trt.{name}={0 if allow_zero else 1}")

    for name in ("workspace_mb", "min_batch", "opt_batch", "max_batch", "min_sequence"):
        positive(name)
    positive("device", allow_zero=True)
    if not t.min_batch <= t.opt_batch <= t.max_batch:
        raise ConfigError("batch range must satisfy min_batch <= opt_batch <= max_batch",
                          where="backend.trt.min_batch/opt_batch/max_batch",
                          value=(t.min_batch, t.opt_batch, t.max_batch),
                          fix="e.g. min_batch=1 opt_batch=8 max_batch=64")
    if (t.opt_sequence is None) != (t.max_sequence is None):
        raise ConfigError("set both backend.trt.opt_sequence and backend.trt.max_sequence, or "
                          "neither", where="backend.trt.opt_sequence/max_sequence",
                          value=(t.opt_sequence, t.max_sequence),
                          fix="e.g. opt_sequence=128 max_sequence=512")
    if t.opt_sequence is not None:
        positive("opt_sequence")
        positive("max_sequence")
        if not t.min_sequence <= t.opt_sequence <= t.max_sequence:
            raise ConfigError("sequence range must satisfy min <= opt <= max",
                              where="backend.trt.min_sequence/opt_sequence/max_sequence",
                              value=(t.min_sequence, t.opt_sequence, t.max_sequence),
                              fix="e.g. min_sequence=1 opt_sequence=128 max_sequence=512")
    lvl = t.builder_optimization_level
    if not isinstance(lvl, int) or isinstance(lvl, bool) or not 0 <= lvl <= 5:
        raise ConfigError("backend.trt.builder_optimization_level must be an integer in 0..5",
                          where="backend.trt.builder_optimization_level", value=lvl,
                          fix="3 is TensorRT's default; 5 searches longest")
    major = t.tensorrt_major
    if major is not None and (not isinstance(major, int) or major < TRT_MIN_MAJOR):
        raise ConfigError(f"backend.trt.tensorrt_major must be >= {TRT_MIN_MAJOR} or null",
                          where="backend.trt.tensorrt_major", value=major, fix="10, 11 or null")
    if t.image_range is not None:
        t.image_range = _trt_range(t.image_range, "backend.trt.image_range")
    t.dim_overrides = {str(k): _trt_range(v, f"backend.trt.dim_overrides.{k}")
                       for k, v in dict(t.dim_overrides).items()}
    overrides: dict[str, tuple] = {}
    for name, shapes in dict(t.shape_overrides).items():
        where = f"backend.trt.shape_overrides.{name}"
        fix = "e.g. [[1, 16], [8, 128], [64, 512]]"
        if isinstance(shapes, (str, bytes)) or not hasattr(shapes, "__iter__"):
            raise ConfigError("a shape override must be [min_shape, opt_shape, max_shape]",
                              where=where, value=shapes, fix=fix)
        triple = [_trt_shape(s, where) for s in shapes]
        if len(triple) != 3 or len({len(s) for s in triple}) != 1:
            raise ConfigError("a shape override must be three shapes of equal rank "
                              "[min_shape, opt_shape, max_shape]", where=where, value=shapes,
                              fix=fix)
        if not all(1 <= a <= b <= c for a, b, c in zip(*triple)):
            raise ConfigError("shape override dims must satisfy 1 <= min <= opt <= max",
                              where=where, value=shapes, fix=fix)
        overrides[str(name)] = (triple[0], triple[1], triple[2])
    t.shape_overrides = overrides  # type: ignore[assignment]
