"""Optimization profiles (pure Python): which shapes an engine accepts, and whether they cover
every shape the run will feed, checked before any build.

    needs = shape_needs(settings)                       # batch sizes, max_length / image size
    profiles = profiles_from_model(model, settings.backend.trt, needs=needs)
    check_profiles_cover(profiles, needs)               # one ProfileError before building
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from quantkit.errors import BackendError, ConfigError
from quantkit.settings import TrtConfig

Shape = tuple[int, ...]
Profile = tuple[Shape, Shape, Shape]


class ProfileError(BackendError, ConfigError):
    """An input's optimization-profile shape is missing, invalid or too narrow for the run: a
    configuration problem the TensorRT backend finds. Catchable as ``BackendError`` and as
    ``ConfigError``."""


@dataclass(frozen=True)
class ShapeNeeds:
    """The shapes a run feeds an engine: every batch size (evaluation, backend check, latency)
    and the longest sequence (text) or the image size and layout (images)."""

    kind: str = "text"  # text | image
    batch_sizes: tuple[int, ...] = ()
    sequence_length: int | None = None  # text: data.max_length (batches pad up to it)
    image_size: int | None = None  # images: data.image.size (H = W)
    image_channels: int | None = None
    image_layout: str = "NCHW"
    sources: dict[str, str] = field(default_factory=dict)  # batch size -> the setting it came from
    latency_batch_sizes: tuple[int, ...] = ()  # bench.batch_sizes (latency profiles)

    def spatial_axes(self) -> tuple[int, int]:
        return (1, 2) if self.image_layout == "NHWC" else (2, 3)

    def channel_axis(self) -> int:
        return 3 if self.image_layout == "NHWC" else 1


def shape_needs(settings) -> ShapeNeeds:
    """What a run (a :class:`~quantkit.settings.Settings`) will feed its engines."""
    sources: dict[str, str] = {str(settings.backend.batch_size): "backend.batch_size"}
    if settings.bench.enabled:
        for i, b in enumerate(settings.bench.batch_sizes):
            sources.setdefault(str(b), f"bench.batch_sizes[{i}]")
    sizes = tuple(sorted({int(b) for b in sources}))
    latency = tuple(settings.bench.batch_sizes) if settings.bench.enabled else ()
    if settings.data.kind == "image":
        im = settings.data.image
        return ShapeNeeds(kind="image", batch_sizes=sizes, image_size=im.size,
                          image_channels=im.channels, image_layout=im.layout, sources=sources,
                          latency_batch_sizes=latency)
    return ShapeNeeds(kind="text", batch_sizes=sizes, sequence_length=settings.data.max_length,
                      sources=sources, latency_batch_sizes=latency)


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph's real inputs (initializers listed as inputs left out)."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def _is_image_input(dims: Sequence, needs: ShapeNeeds | None) -> bool:
    return needs is not None and needs.kind == "image" and len(dims) == 4


def _dynamic_range(input_name: str, axis: int, dim_name: str, settings: TrtConfig,
                   needs: ShapeNeeds | None, image: bool) -> tuple[int, int, int]:
    if dim_name and dim_name in settings.dim_overrides:
        return tuple(settings.dim_overrides[dim_name])  # type: ignore[return-value]
    if axis == 0:
        return settings.min_batch, settings.opt_batch, settings.max_batch
    if image:
        if axis == needs.channel_axis() and needs.image_channels:
            c = needs.image_channels
            return c, c, c
        if axis in needs.spatial_axes():
            if settings.image_range is not None:
                return tuple(settings.image_range)  # type: ignore[return-value]
            if needs.image_size:
                s = needs.image_size
                return s, s, s
        raise _no_value(f"image input {input_name!r}", input_name, axis, dim_name,
                        "backend.trt.image_range=[min, opt, max]")
    if settings.opt_sequence is not None and settings.max_sequence is not None:
        return settings.min_sequence, settings.opt_sequence, settings.max_sequence
    raise _no_value(f"input {input_name!r}", input_name, axis, dim_name,
                    "backend.trt.opt_sequence and backend.trt.max_sequence")


def _no_value(what: str, input_name: str, axis: int, dim_name: str, first: str) -> ProfileError:
    label = f"{dim_name!r}" if dim_name else "unnamed"
    override = dim_name or "<dim name>"
    return ProfileError(
        f"{what} dim {axis} ({label}) is dynamic and has no profile value",
        where=f"input {input_name}", value=dim_name or f"dim {axis}",
        fix=f"set {first}, backend.trt.dim_overrides.{override}=[min, opt, max], or "
            f"backend.trt.shape_overrides.{input_name}=[min_shape, opt_shape, max_shape]")


def profiles_from_model(model: onnx.ModelProto, settings: TrtConfig, *,
                        needs: ShapeNeeds | None = None) -> dict[str, Profile]:
    """``{input: (min_shape, opt_shape, max_shape)}`` for every graph input with a dynamic dim.

    Static dims are copied; the batch dim (axis 0) takes min/opt/max_batch; other dynamic dims
    take ``dim_overrides[dim_name]``, else, for a rank-4 input of an image run (``needs.kind ==
    "image"``), ``image_range`` or the run's image size on the spatial axes and the channel
    count on the channel axis, else the sequence range. ``shape_overrides[input]`` replaces the
    whole triple (it must agree with the static dims). Inputs with only static dims need no
    profile and are left out. A dynamic dim with no value raises ``ProfileError`` naming it.
    """
    inputs = graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(settings.shape_overrides) - set(names))
    if unknown:
        raise ProfileError("backend.trt.shape_overrides names an input the model does not have",
                           where="backend.trt.shape_overrides", value=unknown[0],
                           fix=f"use one of the model inputs {names}")
    profiles: dict[str, Profile] = {}
    for vi in inputs:
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            raise ProfileError(f"input {name!r} is not a tensor", where=f"input {name}",
                               fix="TensorRT takes tensor inputs only; export the model with tensors")
        tensor = vi.type.tensor_type
        override = settings.shape_overrides.get(name)
        if not tensor.HasField("shape"):
            if override is None:
                raise ProfileError(f"input {name!r} has no shape (unknown rank)",
                                   where=f"input {name}",
                                   fix=f"set backend.trt.shape_overrides.{name}=[min_shape, "
                                       "opt_shape, max_shape] or export the model with input shapes")
            profiles[name] = override
            continue
        dims = list(tensor.shape.dim)
        static = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                  for d in dims]
        if override is not None:
            if len(override[0]) != len(dims):
                raise ProfileError(f"shape override for input {name!r} has rank {len(override[0])}; "
                                   f"the model input has rank {len(dims)}",
                                   where=f"backend.trt.shape_overrides.{name}", value=override,
                                   fix=f"give {len(dims)} dims per shape")
            for axis, value in enumerate(static):
                if value is not None and any(s[axis] != value for s in override):
                    raise ProfileError(f"shape override for input {name!r} changes static dim "
                                       f"{axis} (= {value})",
                                       where=f"backend.trt.shape_overrides.{name}", value=override,
                                       fix=f"keep dim {axis} at {value} in min, opt and max")
            if any(v is None for v in static):
                profiles[name] = override
            continue
        if all(v is not None for v in static):
            continue
        image = _is_image_input(dims, needs)
        lo, mid, hi = [], [], []
        for axis, (d, value) in enumerate(zip(dims, static)):
            if value is None:
                a, b, c = _dynamic_range(name, axis, d.dim_param, settings, needs, image)
            else:
                a = b = c = value
            lo.append(a)
            mid.append(b)
            hi.append(c)
        profiles[name] = (tuple(lo), tuple(mid), tuple(hi))
    return profiles


def check_profiles_cover(profiles: Mapping[str, Profile], needs: ShapeNeeds,
                         model: onnx.ModelProto | None = None) -> None:
    """Every shape the run feeds must fit the engine profile: one ``ProfileError`` naming the
    input, the dim, the run setting and the fix, before any engine is built.

    Batch (axis 0) must hold every size in ``needs.batch_sizes``; for text, the non-batch
    dynamic dims must reach ``needs.sequence_length``; for images, the spatial dims must hold
    ``needs.image_size``. ``model`` (optional) tells which dims are dynamic; without it every
    profile dim whose min differs from its max, or axis 0, is checked.
    """
    dynamic: dict[str, set[int]] = {}
    if model is not None:
        for vi in graph_inputs(model):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                dynamic[vi.name] = {i for i, d in enumerate(vi.type.tensor_type.shape.dim)
                                    if not (d.HasField("dim_value") and d.dim_value >= 0)}
    for name, (lo, _, hi) in profiles.items():
        axes = dynamic.get(name, {i for i in range(len(lo)) if i == 0 or lo[i] != hi[i]})
        if 0 in axes:
            for b in needs.batch_sizes:
                if not lo[0] <= b <= hi[0]:
                    key = needs.sources.get(str(b), "the run's batch size")
                    raise ProfileError(
                        f"{key}={b} does not fit the engine profile of input {name!r} "
                        f"(batch {lo[0]}..{hi[0]})", where=f"backend.trt (input {name})", value=b,
                        fix=f"set backend.trt.min_batch <= {b} <= backend.trt.max_batch "
                            f"(now {lo[0]}..{hi[0]}), or change {key}")
        rest = sorted(a for a in axes if a != 0)
        if not rest:
            continue
        if needs.kind == "image" and len(lo) == 4 and needs.image_size:
            s = needs.image_size
            for a in (a for a in rest if a in needs.spatial_axes()):
                if not lo[a] <= s <= hi[a]:
                    raise ProfileError(
                        f"data.image.size={s} does not fit the engine profile of input {name!r} "
                        f"dim {a} ({lo[a]}..{hi[a]})", where=f"backend.trt (input {name})",
                        value=s, fix="set backend.trt.image_range=[min, opt, max] to include "
                                     f"{s}, or change data.image.size")
        elif needs.kind == "text" and needs.sequence_length:
            n = needs.sequence_length
            for a in rest:
                if hi[a] < n:
                    raise ProfileError(
                        f"data.max_length={n} does not fit the engine profile of input {name!r} "
                        f"dim {a} (max {hi[a]})", where=f"backend.trt (input {name})", value=n,
                        fix=f"set backend.trt.max_sequence >= {n} (now {hi[a]}), or lower "
                            "data.max_length")


def profile_set(profiles: Mapping[str, Profile], batch_sizes: Sequence[int] = ()
                ) -> list[dict[str, Profile]]:
    """The engine's optimization profiles: ``profiles`` first (index 0, every stage runs on
    it), then one per batch size in ``batch_sizes`` with that batch fixed (min = opt = max) and
    every other dim as in profile 0, so TensorRT tunes kernels for each timed batch size.
    Batch sizes outside profile 0's range or equal to its opt are left out (profile 0 serves
    them)."""
    out = [dict(profiles)]
    batched = {n: p for n, p in profiles.items() if p[0] and p[0][0] != p[2][0]}
    if not batched:
        return out
    for b in sorted(set(int(b) for b in batch_sizes)):
        if not all(p[0][0] <= b <= p[2][0] for p in batched.values()):
            continue
        if all(p[1][0] == b for p in batched.values()):
            continue
        extra = {}
        for name, (lo, mid, hi) in profiles.items():
            if name in batched:
                lo, mid, hi = ((b,) + tuple(lo[1:]), (b,) + tuple(mid[1:]), (b,) + tuple(hi[1:]))
            extra[name] = (tuple(lo), tuple(mid), tuple(hi))
        out.append(extra)
    return out
