"""Stage cache: stable keys, verified entries, corrupt/partial entries rebuilt, one compute
per key across real processes."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import quantkit.cache as cache_mod
from quantkit.cache import StageCache, stage_key
from quantkit.errors import ConfigError, DataError, QuantkitError
from quantkit.fsutil import sha256_file

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class _Calib:
    method: str = "entropy"
    bins: int = 2048
    percentile: float = 99.99


# ---------------------------------------------------------------------------------------
# keys

def test_key_is_stable_and_order_free():
    a = stage_key("calibrate", model="ab" * 32, settings={"method": "entropy", "bins": 2048})
    b = stage_key("calibrate", settings={"bins": 2048, "method": "entropy"}, model="ab" * 32)
    assert a == b and len(a) == 64
    # numpy scalars, tuples and dataclasses spell like their plain equivalents
    assert stage_key("s", x=np.float64(0.1), n=np.int64(3), t=(1, 2)) == \
        stage_key("s", x=0.1, n=3, t=[1, 2])
    assert stage_key("s", c=_Calib()) == \
        stage_key("s", c={"percentile": 99.99, "bins": 2048, "method": "entropy"})
    assert stage_key("s", x=0.1 + 0.2) == stage_key("s", x=0.30000000000000004)
    assert stage_key("s", tags={"b", "a"}) == stage_key("s", tags={"a", "b"})


def test_key_golden_value():
    # The documented canonical form, spelled out; and the pinned value. Changing either
    # silently invalidates every cache: do it on purpose (bump CACHE_VERSION, update here).
    inputs = {"model": "0" * 64, "settings": {"bins": 2048, "p": 99.99}}
    doc = {"stage": "calibrate", "version": cache_mod.CACHE_VERSION, "inputs": inputs}
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    key = stage_key("calibrate", **inputs)
    assert key == hashlib.sha256(canonical.encode()).hexdigest()
    assert key == "f7676faa5ae17a1c1d8297e9d2d6bcb7c3eee91256430b0a238ff33535f6b477"


def test_any_change_changes_the_key(monkeypatch):
    base = dict(model="ab" * 32, settings={"method": "entropy", "bins": 2048, "p": 99.99})
    k = stage_key("calibrate", **base)
    variants = [
        stage_key("fp16", **base),
        stage_key("calibrate", **{**base, "model": "cd" * 32}),
        stage_key("calibrate", **{**base, "settings": {**base["settings"], "bins": 1024}}),
        stage_key("calibrate", **{**base, "settings": {**base["settings"], "p": 99.999}}),
        stage_key("calibrate", **{**base, "settings": {**base["settings"], "p": 100}}),
        stage_key("calibrate", **{**base, "extra": None}),
        stage_key("calibrate", **{**base, "settings": {**base["settings"], "bins": 2048.0}}),
        stage_key("calibrate", model=base["model"]),
        stage_key("calibrate", **base, arr=np.zeros(3, np.float32)),
        stage_key("calibrate", **base, arr=np.zeros(3, np.float64)),
        stage_key("calibrate", **base, arr=np.zeros((3, 1), np.float32)),
    ]
    assert len({k, *variants}) == len(variants) + 1
    monkeypatch.setattr(cache_mod, "CACHE_VERSION", "quantkit-stage-cache/999")
    assert stage_key("calibrate", **base) != k


def test_key_rejects_unhashable_inputs():
    with pytest.raises(ConfigError, match="cannot be hashed stably"):
        stage_key("s", x=object())
    with pytest.raises(ConfigError, match="string dict keys"):
        stage_key("s", x={1: "a"})
    with pytest.raises(ConfigError, match="stage name"):
        stage_key("../etc", x=1)


# ---------------------------------------------------------------------------------------
# put / get

def _key(n: int = 0) -> str:
    return stage_key("calibrate", n=n)


def test_put_get_round_trip(tmp_path):
    src = tmp_path / "model.onnx"
    src.write_bytes(b"onnx bytes")
    cache = StageCache(tmp_path / "cache")
    key = _key()
    assert cache.get("calibrate", key) is None
    arrays = {"amax": np.array([1.5, 2.5], np.float32), "file": np.arange(4)}
    entry = cache.put("calibrate", key, {"model.onnx": src}, json_obj={"ranges": {"x": 1.0}},
                      arrays=arrays, inputs={"n": 0})
    assert entry == tmp_path / "cache" / "calibrate" / key[:2] / key

    got = cache.get("calibrate", key)
    assert got == entry
    assert (got / "model.onnx").read_bytes() == b"onnx bytes"
    assert cache.load_json(got) == {"ranges": {"x": 1.0}}
    loaded = cache.load_arrays(got)
    assert loaded.keys() == arrays.keys()
    for name, a in arrays.items():
        assert loaded[name].dtype == a.dtype and np.array_equal(loaded[name], a)

    manifest = json.loads((got / "entry.json").read_text())
    assert manifest["stage"] == "calibrate" and manifest["key"] == key
    assert manifest["inputs"] == {"n": 0} and manifest["created"]
    files = {f["name"]: f for f in manifest["files"]}
    assert set(files) == {"model.onnx", "data.json", "arrays.npz"}
    assert files["model.onnx"] == {"name": "model.onnx", "size": 10,
                                   "sha256": sha256_file(src)}
    assert cache.stats() == {"calibrate": {"hits": 1, "misses": 1}}
    assert not [p for p in entry.parent.iterdir() if p.name.startswith(".")]


def test_put_keeps_the_entry_that_is_already_there(tmp_path):
    cache = StageCache(tmp_path)
    first = cache.put("calibrate", _key(), json_obj={"who": "first"})
    second = StageCache(tmp_path).put("calibrate", _key(), json_obj={"who": "second"})
    assert first == second
    assert cache.load_json(second) == {"who": "first"}
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # ours discarded


def test_object_arrays_are_refused(tmp_path):
    cache = StageCache(tmp_path)
    with pytest.raises(DataError, match="numeric"):
        cache.put("calibrate", _key(), arrays={"x": np.array([{}, []], dtype=object)})
    assert cache.get("calibrate", _key()) is None


# ---------------------------------------------------------------------------------------
# corrupt and partial entries

def _count_compute(counter: Path, payload: str = "ranges"):
    def compute(out: Path) -> None:
        with open(counter, "a") as f:
            f.write("x\n")
        (out / "ranges.json").write_text(json.dumps({"v": payload}))
    return compute


@pytest.mark.parametrize("damage", ["flip_byte", "delete_file", "bad_manifest",
                                    "no_manifest", "manifest_for_other_key"])
def test_corrupt_entry_is_a_miss_and_is_rebuilt(tmp_path, caplog, damage):
    cache = StageCache(tmp_path / "cache")
    counter = tmp_path / "count"
    key = _key()
    entry, hit = cache.get_or_compute("calibrate", key, _count_compute(counter))
    assert not hit
    f = entry / "ranges.json"
    if damage == "flip_byte":
        f.write_text(f.read_text().replace("ranges", "rangez"))  # same size, other bytes
    elif damage == "delete_file":
        f.unlink()
    elif damage == "bad_manifest":
        (entry / "entry.json").write_text("{not json")
    elif damage == "no_manifest":
        (entry / "entry.json").unlink()
    else:
        m = json.loads((entry / "entry.json").read_text())
        (entry / "entry.json").write_text(json.dumps({**m, "key": _key(1)}))

    with caplog.at_level(logging.WARNING, logger="quantkit.cache"):
        assert cache.get("calibrate", key) is None
    assert "corrupt" in caplog.text and key in caplog.text
    assert not entry.exists()

    entry2, hit2 = cache.get_or_compute("calibrate", key, _count_compute(counter))
    assert (entry2, hit2) == (entry, False)
    assert counter.read_text().count("x") == 2
    assert cache.get("calibrate", key) == entry
    assert [p.name for p in entry.parent.iterdir()] == [key]  # corrupt copy cleaned up


def test_partial_entry_left_by_a_killed_writer_is_ignored(tmp_path):
    cache = StageCache(tmp_path)
    key = _key()
    shard = tmp_path / "calibrate" / key[:2]
    partial = shard / f".tmp-{key}-killed"
    partial.mkdir(parents=True)
    (partial / "ranges.json").write_text('{"v": "half')
    assert cache.get("calibrate", key) is None

    counter = tmp_path / "count"
    entry, hit = cache.get_or_compute("calibrate", key, _count_compute(counter))
    assert not hit and json.loads((entry / "ranges.json").read_text()) == {"v": "ranges"}
    assert cache.get_or_compute("calibrate", key, _count_compute(counter)) == (entry, True)
    assert counter.read_text() == "x\n"


def test_failed_compute_stores_nothing_and_releases_the_lock(tmp_path):
    cache = StageCache(tmp_path)
    key = _key()

    def broken(out: Path) -> None:
        (out / "half.bin").write_bytes(b"half")
        raise RuntimeError("stage failed")

    with pytest.raises(RuntimeError, match="stage failed"):
        cache.get_or_compute("calibrate", key, broken)
    assert cache.get("calibrate", key) is None
    assert list((tmp_path / "calibrate" / key[:2]).iterdir()) == []
    entry, hit = cache.get_or_compute("calibrate", key, _count_compute(tmp_path / "count"))
    assert not hit and entry.exists()
    assert cache.stats() == {"calibrate": {"hits": 0, "misses": 3}}


def test_disabled_cache_never_reuses_nor_touches_root(tmp_path):
    root = tmp_path / "cache"
    cache = StageCache(root, enabled=False)
    counter = tmp_path / "count"
    e1, hit1 = cache.get_or_compute("calibrate", _key(), _count_compute(counter, "a"))
    e2, hit2 = cache.get_or_compute("calibrate", _key(), _count_compute(counter, "b"))
    assert (hit1, hit2) == (False, False) and counter.read_text() == "x\nx\n"
    assert json.loads((e2 / "ranges.json").read_text()) == {"v": "b"}
    assert cache.get("calibrate", _key()) is None
    assert not root.exists()


def test_unwritable_cache_root_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="writable directory") as ei:
        StageCache(blocker / "cache").put("calibrate", _key(), json_obj={})
    assert str(blocker / "cache") in str(ei.value)


def test_disk_full_while_storing_is_one_clear_error(tiny_fs):
    cache = StageCache(tiny_fs)
    with pytest.raises(QuantkitError, match="disk full") as ei:
        cache.put("calibrate", _key(), arrays={"big": np.zeros(1 << 17)})
    assert str(tiny_fs) in str(ei.value)
    shard = tiny_fs / "calibrate" / _key()[:2]
    assert list(shard.iterdir()) == []  # no staging dir, no half entry


# ---------------------------------------------------------------------------------------
# two real processes, one key

_WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from quantkit.cache import StageCache, stage_key
    from quantkit.fsutil import sha256_file

    root, counter, go, ready = map(Path, sys.argv[1:5])
    ready.touch()
    while not go.exists():
        time.sleep(0.005)

    def compute(out):
        with open(counter, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(0.5)  # widen the window: the other process arrives while we compute
        (out / "ranges.json").write_text(json.dumps({"amax": 3.5}))

    cache = StageCache(root)
    key = stage_key("calibrate", model="ab" * 32, bins=2048)
    entry, hit = cache.get_or_compute("calibrate", key, compute)
    print(json.dumps({"entry": str(entry), "hit": hit,
                      "sha": sha256_file(entry / "ranges.json"),
                      "manifest": (entry / "entry.json").read_text()}))
""")


def _start_workers(tmp_path: Path, script: str, n: int, *extra: str) -> tuple[list, Path]:
    """``n`` real Python processes running ``script``; each touches ready<i> when started and
    then waits for the file ``go``, so they all ask for the stage at the same moment."""
    path = tmp_path / "worker.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    go = tmp_path / "go"
    procs = []
    for i in range(n):
        args = [str(tmp_path / "cache"), str(tmp_path / "count"), str(go),
                str(tmp_path / f"ready{i}"), *extra]
        procs.append(subprocess.Popen([sys.executable, str(path), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        assert time.monotonic() < deadline, "workers did not start"
        time.sleep(0.01)
    return procs, go


def test_four_processes_compute_one_key_once_and_read_the_same_bytes(tmp_path):
    n = 4
    procs, go = _start_workers(tmp_path, _WORKER, n)
    go.touch()  # release all workers at once
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))

    assert len((tmp_path / "count").read_text().splitlines()) == 1  # computed exactly once
    assert sorted(r["hit"] for r in results) == [False] + [True] * (n - 1)
    assert len({r["entry"] for r in results}) == 1
    assert len({r["sha"] for r in results}) == 1
    assert len({r["manifest"] for r in results}) == 1
    cache = StageCache(tmp_path / "cache")
    stored = [e for e in cache.events() if e["event"] == "stored"]
    computer = next(p.pid for p, r in zip(procs, results) if not r["hit"])
    assert [(e["stage"], e["pid"]) for e in stored] == [("calibrate", computer)]  # the log says who
    assert cache.problems() == []


# A writer killed in the middle of writing: it writes half of its output, says so, and
# hangs until the test SIGKILLs it. A second process waits on the key's lock meanwhile.
_KILLED_WRITER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from quantkit.cache import StageCache, stage_key

    root, counter, go, ready, role = sys.argv[1:6]
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.005)
    if role == "waiter":
        time.sleep(0.3)  # the writer holds the lock by now

    def compute(out):
        with open(counter, "a") as f:
            f.write(f"{role} {os.getpid()}\\n")
        if role == "writer":
            with open(out / "ranges.bin", "wb") as f:
                f.write(b"half" * 4096)
                f.flush()
                Path(root, "..", "mid-write").touch()
                time.sleep(600)  # SIGKILLed here, with half a file written
        (out / "ranges.bin").write_bytes(b"whole" * 4096)

    cache = StageCache(root)
    key = stage_key("calibrate", model="cd" * 32)
    entry, hit = cache.get_or_compute("calibrate", key, compute)
    print(json.dumps({"hit": hit, "size": (entry / "ranges.bin").stat().st_size}))
""")


def test_a_writer_killed_mid_write_leaves_nothing_a_reader_takes_for_a_result(tmp_path):
    import signal

    procs, go = _start_workers(tmp_path, _KILLED_WRITER, 1, "writer")
    writer = procs[0]
    go.touch()
    deadline = time.monotonic() + 120
    while not (tmp_path / "mid-write").exists():
        assert writer.poll() is None, writer.communicate()
        assert time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.01)
    (tmp_path / "go").unlink()
    waiters, go = _start_workers(tmp_path, _KILLED_WRITER, 1, "waiter")
    go.touch()
    time.sleep(0.6)
    assert waiters[0].poll() is None  # blocked on the lock the writer holds
    os.kill(writer.pid, signal.SIGKILL)  # not reaped until the waiter is done: a zombie

    cache = StageCache(tmp_path / "cache")
    key = stage_key("calibrate", model="cd" * 32)
    out, err = waiters[0].communicate(timeout=120)  # the lock died with the writer
    assert waiters[0].returncode == 0, err
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    assert json.loads(out) == {"hit": False, "size": 5 * 4096}  # it recomputed, whole
    assert [ln.split()[0] for ln in (tmp_path / "count").read_text().splitlines()] == [
        "writer", "waiter"]
    entry = cache.get("calibrate", key)
    assert (entry / "ranges.bin").read_bytes() == b"whole" * 4096
    assert cache.problems() == []  # every entry verifies; the dead writer's staging is gone
    assert [e["pid"] for e in cache.events() if e["event"] == "stored"] == [waiters[0].pid]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_process_inside_exit_or_a_zombie_counts_as_gone():
    """A SIGKILLed writer's lock is released when the kernel closes its files, before the
    task becomes a zombie; in that window its stat line still says running but carries
    PF_EXITING. A waiter woken by the lock must read that writer as gone (CI once left the
    writer's staging behind when the waiter won this race on a 2-core host)."""
    own = Path("/proc/self/stat").read_text()
    assert cache_mod._stat_says_running(own)
    head, tail = own.rsplit(")", 1)
    fields = tail.split()
    fields[6] = str(int(fields[6]) | 0x4)  # this very line, with the exiting flag set
    assert not cache_mod._stat_says_running(f"{head}) {' '.join(fields)}\n")

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while cache_mod._pid_alive(child.pid):  # exits, unreaped: a zombie, then dead
        assert time.monotonic() < deadline, Path(f"/proc/{child.pid}/stat").read_text()
        time.sleep(0.01)
    assert Path(f"/proc/{child.pid}/stat").exists()  # still there, not reaped
    child.wait()
    assert not cache_mod._pid_alive(child.pid)
    assert cache_mod._pid_alive(os.getpid())


def test_problems_names_half_written_and_corrupt_entries(tmp_path):
    cache = StageCache(tmp_path)
    good = cache.put("calibrate", _key(1), json_obj={"v": 1})
    bad = cache.put("calibrate", _key(2), json_obj={"v": 2})
    (bad / "data.json").write_text((bad / "data.json").read_text().replace("2", "3"))  # same size
    staging = good.parent / f".tmp-{_key(1)}-otherhost-1-x"
    staging.mkdir()
    got = cache.problems()
    assert len(got) == 2, got
    assert any(p.startswith("fails verification (sha256 of data.json") and _key(2) in p
               for p in got)
    assert any(p.startswith("left over:") and staging.name in p for p in got)
    assert cache.get("calibrate", _key(1)) == good
