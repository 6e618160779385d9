"""The builder's timing cache: one file per TensorRT version and GPU, and writers that finish
at the same time merge their entries under a lock instead of overwriting each other."""

import multiprocessing as mp
from pathlib import Path

import pytest

from quantkit.backends.trt import GpuInfo, merge_into_file, timing_cache_path

A100 = GpuInfo(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
L4 = GpuInfo(index=1, name="NVIDIA L4", compute_capability="8.9")


def test_the_file_name_carries_tensorrt_version_and_gpu(tmp_path):
    """Before: one timing.cache for every TensorRT version and GPU sharing the cache dir."""
    a = timing_cache_path(tmp_path, "10.13.0.35", A100)
    assert a == tmp_path / "timing-trt10.13.0.35-nvidia-a100-sxm4-80gb-sm_80.cache"
    assert timing_cache_path(tmp_path, "11.1.0.7", A100) != a
    assert timing_cache_path(tmp_path, "10.13.0.35", L4) != a
    assert timing_cache_path(tmp_path, "10.13.0.35", A100) == a  # stable
    stem = timing_cache_path(tmp_path / "shared.cache", "10.13.0.35", L4)
    assert stem == tmp_path / "shared-trt10.13.0.35-nvidia-l4-sm_89.cache"
    assert timing_cache_path("~/tc", "10.13.0.35", L4).parent == Path("~/tc").expanduser()


def _union(ours: bytes, disk: bytes) -> bytes:
    """Entries are lines: the union, sorted (what ITimingCache.combine does for timings)."""
    return b"".join(sorted(set(ours.splitlines(True)) | set(disk.splitlines(True))))


def _writer(path: str, tag: str, n: int) -> None:
    for i in range(n):
        merge_into_file(path, f"{tag}-{i}\n".encode(), _union)


def test_concurrent_writers_merge_instead_of_overwriting(tmp_path):
    path = tmp_path / "timing-x.cache"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(path), tag, 20)) for tag in ("a", "b", "c")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = path.read_bytes().splitlines()
    assert len(lines) == 60 and {l.split(b"-")[0] for l in lines} == {b"a", b"b", b"c"}


def test_first_writer_and_identical_content_need_no_merge(tmp_path):
    path = tmp_path / "t.cache"

    def refuse(ours, disk):
        pytest.fail("merge called without anything to merge")

    assert merge_into_file(path, b"x\n", refuse) == b"x\n" and path.read_bytes() == b"x\n"
    assert merge_into_file(path, b"x\n", refuse) == b"x\n"
    assert merge_into_file(path, b"y\n", _union) == b"x\ny\n"
