"""Atomic writes: whole file or nothing, 0644 & ~umask, one clear error when it can't write."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from quantkit.errors import ConfigError
from quantkit.fsutil import (atomic_path, atomic_write_bytes, atomic_write_json,
                             atomic_write_text, current_umask, sha256_file)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_writes_round_trip_and_create_parents(tmp_path):
    b = atomic_write_bytes(tmp_path / "a" / "b" / "x.bin", b"\x00\x01")
    t = atomic_write_text(tmp_path / "t.txt", "héllo\n")
    j = atomic_write_json(tmp_path / "j.json", {"p": Path("/x"), "n": 1.5}, durable=False)
    assert b.read_bytes() == b"\x00\x01"
    assert t.read_text(encoding="utf-8") == "héllo\n"
    text = j.read_text()
    assert text == '{\n  "p": "/x",\n  "n": 1.5\n}\n'  # indent 2, default=str, newline
    assert json.loads(text) == {"p": "/x", "n": 1.5}


def test_overwrite_replaces_whole_file(tmp_path):
    p = tmp_path / "x.txt"
    atomic_write_text(p, "old old old")
    atomic_write_text(p, "new")
    assert p.read_text() == "new"
    assert os.listdir(tmp_path) == ["x.txt"]


def test_mode_is_0644_minus_umask(tmp_path, umask_022):
    p = atomic_write_bytes(tmp_path / "m.bin", b"x")
    assert _mode(p) == 0o644  # mkstemp alone would give 0600
    os.umask(0o027)
    assert current_umask() == 0o027
    q = atomic_write_bytes(tmp_path / "m2.bin", b"x")
    assert _mode(q) == 0o640


def test_atomic_path_for_writers_that_need_a_filename(tmp_path, umask_022):
    target = tmp_path / "arr.npy"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".npy"  # np.save keeps the name
        np.save(tmp, np.arange(3))
    assert np.load(target).tolist() == [0, 1, 2]
    assert _mode(target) == 0o644
    assert os.listdir(tmp_path) == ["arr.npy"]


def test_failure_inside_atomic_path_leaves_target_and_no_temp(tmp_path):
    target = atomic_write_text(tmp_path / "keep.txt", "original")
    with pytest.raises(RuntimeError, match="writer broke"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer broke")
    assert target.read_text() == "original"
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_directory_that_cannot_exist_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("i am a file")
    with pytest.raises(ConfigError) as ei:
        atomic_write_text(blocker / "x" / "out.json", "{}")
    msg = str(ei.value)
    assert str(blocker / "x" / "out.json") in msg and "choose a writable directory" in msg
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_is_one_clear_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match="choose a writable directory"):
            atomic_write_bytes(ro / "x.bin", b"x")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_disk_full_is_one_clear_error_and_leaves_nothing(tiny_fs):
    target = atomic_write_text(tiny_fs / "report.json", "small and whole")
    with pytest.raises(ConfigError) as ei:
        atomic_write_bytes(target, b"x" * (1 << 20))
    msg = str(ei.value)
    assert "disk full" in msg and str(target) in msg
    assert target.read_text() == "small and whole"
    assert os.listdir(tiny_fs) == ["report.json"]


def test_disk_full_inside_atomic_path_writer(tiny_fs):
    target = tiny_fs / "big.npy"
    with pytest.raises(ConfigError, match="disk full"):
        with atomic_path(target) as tmp:
            np.save(tmp, np.zeros(1 << 17))
    assert os.listdir(tiny_fs) == []


def test_sha256_file(tmp_path):
    data = os.urandom(3 * 1024 + 7)
    p = atomic_write_bytes(tmp_path / "r.bin", data)
    assert sha256_file(p, chunk_bytes=1000) == hashlib.sha256(data).hexdigest()
