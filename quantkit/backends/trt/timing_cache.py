"""The builder's timing cache: one file per TensorRT version and GPU, merged, never overwritten.

A timing cache only helps the TensorRT version and GPU that measured it (TensorRT refuses a
mismatched one, or with ``ignore_mismatch`` uses timings of another device). So the file name
carries both, and a build that finishes merges its timings into what is on disk under an
exclusive lock (``ITimingCache.combine``) instead of overwriting a concurrent writer's entries.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from quantkit.backends.engine_meta import sm_name
from quantkit.backends.trt.availability import GpuInfo
from quantkit.fsutil import atomic_write_bytes

log = logging.getLogger(__name__)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def timing_cache_path(base: str | os.PathLike, trt_version: str, gpu: GpuInfo) -> Path:
    """``<dir>/timing-trt10.13.0.35-nvidia-a100-sxm4-80gb-sm_80.cache`` for a directory ``base``;
    ``<stem>-<same key>.cache`` beside it for a file path ending in ``.cache``."""
    base = Path(base).expanduser()
    key = f"trt{_slug(trt_version)}-{_slug(gpu.name)}-{sm_name(gpu.compute_capability)}"
    if base.suffix == ".cache":
        return base.with_name(f"{base.stem}-{key}.cache")
    return base / f"timing-{key}.cache"


@contextmanager
def locked(path: Path):
    """An exclusive ``flock`` on ``<path>.lock`` for the block (blocks until it is free)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def merge_into_file(path: str | os.PathLike, ours: bytes,
                    merge: Callable[[bytes, bytes], bytes]) -> bytes:
    """Under the lock: read what is on disk now, ``merge(ours, on_disk)``, write it atomically.

    Two builds finishing at once both keep their entries; the result is returned."""
    path = Path(path)
    with locked(path):
        disk = path.read_bytes() if path.is_file() else b""
        data = merge(ours, disk) if disk and disk != ours else ours
        atomic_write_bytes(path, data)
    return data


def load_timing_cache(config, path: Path | None):
    """Attach the timing cache at ``path`` (or an empty one) to a builder config."""
    data = path.read_bytes() if path is not None and path.is_file() else b""
    cache = config.create_timing_cache(data)
    if cache is None and data:
        log.warning("timing cache %s could not be read; starting an empty one", path)
        cache = config.create_timing_cache(b"")
    if not config.set_timing_cache(cache, ignore_mismatch=False):
        log.warning("timing cache %s was made on another GPU/TensorRT; starting an empty one", path)
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def save_timing_cache(config, path: Path) -> None:
    """Merge the config's timing cache into ``path`` (``ITimingCache.combine``) and write it."""
    updated = config.get_timing_cache()
    if updated is None:
        return

    def combine(ours: bytes, disk: bytes) -> bytes:
        other = config.create_timing_cache(disk)
        if other is None or not updated.combine(other, False):
            log.warning("timing cache %s on disk could not be merged (another TensorRT "
                        "version or GPU?); keeping this build's timings", path)
        return bytes(updated.serialize())

    merge_into_file(path, bytes(updated.serialize()), combine)
