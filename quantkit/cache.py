"""Content-addressed stage cache: reruns and sweep jobs skip work that was done before.

A stage's output is stored under a key that hashes the stage name, :data:`CACHE_VERSION`
and the stage's inputs (hashes of upstream artifacts, settings)::

    root/<stage>/<key[:2]>/<key>/      the entry: the stage's files + entry.json (manifest)
    root/<stage>/<key[:2]>/.tmp-*      an entry being written (ignored by readers)
    root/locks/<key>.lock              flock'ed while one process computes <key>
    root/log.jsonl                     one line per entry stored or removed (who, when)

An entry is built in a temp directory and renamed into place in one step, so a reader sees
a whole entry or none. Every rename into place appends one ``stored`` line to ``log.jsonl``
(host, pid, time), every removal a ``removed`` line: on a cache shared by a sweep's jobs,
the log shows which process computed each entry, and that each was computed once. ``get`` re-hashes every file against the manifest; a corrupt entry
is moved aside and reported as a miss, so the caller rebuilds it. That check is also why
entries are not fsync'ed: a file lost in a crash is caught and rebuilt.

Typical use, safe when several processes share ``root``::

    cache = StageCache(root)
    key = stage_key("calibrate", model=model.sha256, data=splits.calib_sha256,
                    settings=settings.calibrator)
    entry, hit = cache.get_or_compute("calibrate", key, lambda out: calibrate_into(out))
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
import weakref
import zipfile
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from quantkit.errors import ConfigError, DataError
from quantkit.fsutil import (atomic_path, atomic_write_json, current_umask, is_disk_full,
                             sha256_file, write_error)

__all__ = ["CACHE_VERSION", "LOG_NAME", "StageCache", "stage_key"]

log = logging.getLogger(__name__)

# Bump when any stage's outputs change meaning for the same inputs: every key changes.
CACHE_VERSION = "quantkit-stage-cache/1"

MANIFEST = "entry.json"
LOG_NAME = "log.jsonl"
JSON_NAME = "data.json"
ARRAYS_NAME = "arrays.npz"
_FORMAT = "quantkit.stage_cache"
_STAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")
# staging directory names carry host and pid; '-' is the field separator
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", os.uname().nodename if hasattr(os, "uname") else "host")


# ---------------------------------------------------------------------------------------
# keys

def _canon(x: Any, where: str) -> Any:
    """``x`` as plain JSON values with one spelling per value (see :func:`stage_key`)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        # repr is the shortest round-trip spelling; non-finite values get a tagged string.
        return f if math.isfinite(f) else {"__float__": repr(f)}
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, enum.Enum):
        return _canon(x.value, where)
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    if isinstance(x, bytes):
        return {"__bytes_sha256__": hashlib.sha256(x).hexdigest()}
    if isinstance(x, np.ndarray):
        if x.dtype.hasobject:
            raise ConfigError("an object array cannot be hashed for a stage cache key",
                              where=where, value=str(x.dtype),
                              fix="pass a numeric array or its sha256")
        a = np.ascontiguousarray(x)
        return {"__ndarray__": hashlib.sha256(a.tobytes()).hexdigest(),
                "dtype": a.dtype.str, "shape": list(a.shape)}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _canon(getattr(x, f.name), f"{where}.{f.name}")
                for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        out = {}
        for k, v in x.items():
            if not isinstance(k, str):
                raise ConfigError("stage cache key inputs need string dict keys",
                                  where=where, value=k, fix="convert the keys to str")
            out[k] = _canon(v, f"{where}.{k}")
        return out
    if isinstance(x, (list, tuple)):
        return [_canon(v, f"{where}[{i}]") for i, v in enumerate(x)]
    if isinstance(x, (set, frozenset)):
        items = [_canon(v, where) for v in x]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    raise ConfigError("a stage cache key input has a type that cannot be hashed stably",
                      where=where, value=type(x).__name__,
                      fix="pass hashes, numbers, strings, lists, dicts or dataclasses")


def _canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def stage_key(stage: str, **inputs: Any) -> str:
    """sha256 hex of a canonical JSON of ``stage``, :data:`CACHE_VERSION` and ``inputs``.

    Canonical: dict keys sorted (insertion order is irrelevant), no whitespace, floats in
    their shortest round-trip form (NaN/inf tagged), tuples as lists, numpy scalars as
    Python numbers, arrays and bytes by their sha256, dataclasses as dicts of their fields.
    ``1`` and ``1.0`` are different inputs.
    """
    _check_stage(stage)
    doc = {"stage": stage, "version": CACHE_VERSION, "inputs": _canon(inputs, stage)}
    return hashlib.sha256(_canonical_json(doc).encode("ascii")).hexdigest()


def _check_stage(stage: str) -> None:
    if not isinstance(stage, str) or not _STAGE_RE.match(stage) or stage == "locks":
        raise ConfigError("invalid stage cache stage name", where="stage", value=stage,
                          fix="use letters, digits, '_', '.', '-' (and not 'locks')")


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ConfigError("invalid stage cache key", where="key", value=key,
                          fix="use stage_key(...) to make keys")


def _check_name(name: str) -> str:
    """A file name inside an entry: relative, no '..', not the manifest."""
    p = Path(name)
    if (not name or p.is_absolute() or ".." in p.parts or name == MANIFEST
            or p.as_posix() != name):
        raise ConfigError("invalid file name for a stage cache entry", where="files",
                          value=name, fix=f"use a plain relative name other than {MANIFEST}")
    return name


# ---------------------------------------------------------------------------------------
# the cache

class _Corrupt(Exception):
    """An entry failed verification (internal; becomes a warning and a miss)."""


class StageCache:
    """Stage outputs stored by content key under ``root`` (see the module docstring).

    ``enabled=False`` never reads or writes ``root``: every lookup misses, and entries are
    built in a private temp directory that is removed when this object is garbage
    collected, so callers keep one code path.
    """

    def __init__(self, root: str | os.PathLike, *, enabled: bool = True) -> None:
        self.root = Path(root)
        self.enabled = enabled
        self._stats: dict[str, dict[str, int]] = {}
        self._scratch: Path | None = None
        if not enabled:
            self._scratch = Path(tempfile.mkdtemp(prefix="quantkit-stage-cache-off-"))
            weakref.finalize(self, shutil.rmtree, self._scratch, True)

    # -- paths ------------------------------------------------------------------------

    def entry_dir(self, stage: str, key: str) -> Path:
        _check_stage(stage)
        _check_key(key)
        base = self.root if self.enabled else self._scratch
        return base / stage / key[:2] / key

    def _lock_path(self, key: str) -> Path:
        return self.root / "locks" / f"{key}.lock"

    # -- reading ----------------------------------------------------------------------

    def get(self, stage: str, key: str) -> Path | None:
        """The entry directory if it is complete and every file matches its manifest."""
        entry = self._lookup(stage, key, locked=False) if self.enabled else None
        self._count(stage, hit=entry is not None)
        if entry is not None:
            log.info("stage cache hit: %s %s", stage, key[:12])
        return entry

    def _lookup(self, stage: str, key: str, *, locked: bool) -> Path | None:
        """The verified entry, or None. A corrupt entry is removed under the key's lock
        (all commits and removals hold it, so a fresh entry is never removed by mistake)."""
        entry = self.entry_dir(stage, key)
        if not entry.exists():
            return None
        try:
            self._verify(entry, stage, key)
            return entry
        except _Corrupt as e:
            if not locked:
                with self.lock(stage, key):
                    return self._lookup(stage, key, locked=True)
            log.warning("stage cache entry %s is corrupt (%s); removing it, it will be "
                        "rebuilt", entry, e)
            self._discard(entry, "corrupt")
            return None

    @staticmethod
    def _verify(entry: Path, stage: str, key: str) -> None:
        try:
            manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
            if (manifest.get("format") != _FORMAT or manifest.get("stage") != stage
                    or manifest.get("key") != key):
                raise _Corrupt("manifest names another entry")
            files = [(_check_name(f["name"]), f["sha256"], int(f["size"]))
                     for f in manifest["files"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, ConfigError) as e:
            raise _Corrupt(f"bad manifest: {e}") from e
        for name, sha, size in files:
            p = entry / name
            if not p.is_file():
                raise _Corrupt(f"missing file {name}")
            if p.stat().st_size != size:
                raise _Corrupt(f"size of {name} differs from the manifest")
            if sha256_file(p) != sha:
                raise _Corrupt(f"sha256 of {name} differs from the manifest")

    def load_json(self, entry: str | os.PathLike, name: str = JSON_NAME) -> Any:
        """The JSON document ``name`` of an entry (written by ``put(json_obj=...)``)."""
        p = Path(entry) / name
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError("cannot read a stage cache JSON file", where=str(p), value=str(e),
                            fix="delete that cache entry; it will be rebuilt") from e

    def load_arrays(self, entry: str | os.PathLike, name: str = ARRAYS_NAME) -> dict[str, np.ndarray]:
        """The arrays of an entry (written by ``put(arrays=...)``), loaded without pickle."""
        p = Path(entry) / name
        try:
            with np.load(p, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise DataError("cannot read stage cache arrays", where=str(p), value=str(e),
                            fix="delete that cache entry; it will be rebuilt") from e

    # -- writing ----------------------------------------------------------------------

    def put(self, stage: str, key: str,
            files: Mapping[str, str | os.PathLike] | None = None, *,
            json_obj: Any = None, arrays: Mapping[str, np.ndarray] | None = None,
            inputs: Mapping[str, Any] | None = None) -> Path:
        """Store files (copied), ``json_obj`` (``data.json``) and ``arrays`` (``arrays.npz``).

        Returns the entry directory. If another process stored the same entry first, its
        entry is kept and ours discarded (same key, same content). ``inputs`` is recorded
        in the manifest for people reading the cache.
        """
        files = dict(files or {})
        for name in files:
            _check_name(name)
        if json_obj is not None and JSON_NAME in files:
            raise ConfigError("put() got both json_obj and a file of the same name",
                              where=f"{stage}/{key[:12]}", value=JSON_NAME,
                              fix="rename the file")
        if arrays is not None and ARRAYS_NAME in files:
            raise ConfigError("put() got both arrays and a file of the same name",
                              where=f"{stage}/{key[:12]}", value=ARRAYS_NAME,
                              fix="rename the file")
        with self._staging(stage, key) as tmp:
            for name, src in files.items():
                dst = tmp / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(src, dst)
                except OSError as e:
                    if is_disk_full(e, dst):
                        raise write_error(e, dst) from e
                    raise DataError("cannot read a file to store in the stage cache",
                                    where=str(src), value=e.strerror,
                                    fix="check that the stage wrote it") from e
            if json_obj is not None:
                atomic_write_json(tmp / JSON_NAME, json_obj, durable=False)
            if arrays is not None:
                _save_arrays(tmp / ARRAYS_NAME, arrays)
            with self.lock(stage, key):
                return self._commit(stage, key, tmp, inputs)

    def get_or_compute(self, stage: str, key: str, compute: Callable[[Path], None], *,
                       inputs: Mapping[str, Any] | None = None) -> tuple[Path, bool]:
        """``(entry, hit)``: the stored entry, or one built by ``compute(out_dir)``.

        ``compute`` writes the stage's files into ``out_dir``. It runs under
        :meth:`lock`, so processes sharing the cache compute each key once: the others
        wait, then find the entry.
        """
        entry = self._lookup(stage, key, locked=False) if self.enabled else None
        if entry is None:
            with self.lock(stage, key):
                entry = self._lookup(stage, key, locked=True) if self.enabled else None
                if entry is None:
                    self._count(stage, hit=False)
                    log.debug("stage cache miss: %s %s; computing", stage, key[:12])
                    with self._staging(stage, key) as tmp:
                        try:
                            compute(tmp)
                        except OSError as e:
                            final = self.entry_dir(stage, key)
                            if is_disk_full(e, final):
                                raise write_error(e, final) from e
                            raise
                        return self._commit(stage, key, tmp, inputs), False
        self._count(stage, hit=True)
        log.info("stage cache hit: %s %s", stage, key[:12])
        return entry, True

    def invalidate(self, stage: str, key: str) -> bool:
        """Remove the entry for ``key`` (under its lock) so the next lookup recomputes it.

        For measurements a user asks to refresh (``bench.remeasure=true``). True if removed.
        """
        if not self.enabled:
            return False
        with self.lock(stage, key):
            entry = self.entry_dir(stage, key)
            if not entry.exists():
                return False
            self._discard(entry, "invalidated")
            log.info("stage cache entry %s %s invalidated", stage, key[:12])
            return True

    @contextlib.contextmanager
    def lock(self, stage: str, key: str) -> Iterator[None]:
        """Exclusive ``flock`` on ``root/locks/<key>.lock`` (blocks until it is free)."""
        import fcntl  # POSIX only; imported here so `import quantkit` works everywhere

        self.entry_dir(stage, key)  # validates stage and key
        if not self.enabled:
            yield
            return
        path = self._lock_path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise self._root_error(e, path) from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("stage cache: waiting for another process computing %s %s",
                         stage, key[:12])
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock; lock files stay (removing them races)

    def events(self) -> list[dict[str, Any]]:
        """The lines of ``root/log.jsonl``, oldest first (``[]`` when none were written).

        Each is ``{"event": "stored" | "removed", "stage", "key", "host", "pid", "time"}``
        (``removed`` adds ``why``: corrupt, invalidated)."""
        path = self.root / LOG_NAME
        if not self.enabled or not path.is_file():
            return []
        out = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut by a crash mid-append: say so, keep the rest
                log.warning("stage cache log %s line %d is not JSON; skipped", path, n)
        return out

    def problems(self) -> list[str]:
        """Reads every entry: each one that fails verification, and each staging or
        aside directory left in place, as ``"<what>: <stage>/<shard>/<name>"``.

        An empty list means every entry is whole and nothing half-written remains. Staging
        directories of processes still running are listed too: call this when no writer runs.
        """
        if not self.enabled or not self.root.is_dir():
            return []
        found = []
        for stage_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if stage_dir.name == "locks":
                continue
            for entry in sorted(stage_dir.glob("*/*")):
                rel = entry.relative_to(self.root).as_posix()
                if entry.name.startswith("."):
                    found.append(f"left over: {rel}")
                    continue
                try:
                    self._verify(entry, stage_dir.name, entry.name)
                except _Corrupt as e:
                    found.append(f"fails verification ({e}): {rel}")
        return found

    def stats(self) -> dict[str, dict[str, int]]:
        """``{stage: {"hits": n, "misses": m}}`` for this object's lookups (for the record)."""
        return {s: dict(c) for s, c in sorted(self._stats.items())}

    # -- internals --------------------------------------------------------------------

    def _count(self, stage: str, *, hit: bool) -> None:
        c = self._stats.setdefault(stage, {"hits": 0, "misses": 0})
        c["hits" if hit else "misses"] += 1

    def _root_error(self, err: OSError, path: Path) -> ConfigError:
        e = write_error(err, path)
        if not is_disk_full(err, path):
            e = ConfigError("the stage cache directory is not writable", where=str(path),
                            value=err.strerror, fix="set cache_dir to a writable directory")
        return e

    @contextlib.contextmanager
    def _staging(self, stage: str, key: str) -> Iterator[Path]:
        """A temp directory beside the entry; removed unless it was renamed into place.

        Its name carries this host and pid, so staging directories left by a killed process
        (SIGKILL, power loss) are recognized and removed by the next writer of the key.
        """
        final = self.entry_dir(stage, key)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            self._remove_dead_staging(final.parent, key)
            tmp = Path(tempfile.mkdtemp(dir=final.parent,
                                        prefix=f".tmp-{key}-{_HOST}-{os.getpid()}-"))
            os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700
        except OSError as e:
            raise self._root_error(e, final.parent) from e
        try:
            yield tmp
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _remove_dead_staging(shard: Path, key: str) -> None:
        """Remove ``.tmp-<key>-<host>-<pid>-*`` directories whose process (on this host) is gone."""
        for d in shard.glob(f".tmp-{key}-{_HOST}-*-*"):
            pid_text = d.name[len(f".tmp-{key}-{_HOST}-"):].split("-", 1)[0]
            if not pid_text.isdigit() or int(pid_text) == os.getpid():
                continue
            if _pid_alive(int(pid_text)):
                continue  # alive (or a reused pid): leave it
            log.info("stage cache: removing %s left by a process that no longer runs", d)
            shutil.rmtree(d, ignore_errors=True)

    def _commit(self, stage: str, key: str, tmp: Path, inputs: Mapping[str, Any] | None) -> Path:
        """Write the manifest and rename ``tmp`` into place. Call under :meth:`lock`."""
        files = sorted(p for p in tmp.rglob("*") if p.is_file() and p != tmp / MANIFEST)
        manifest = {
            "format": _FORMAT,
            "cache_version": CACHE_VERSION,
            "stage": stage,
            "key": key,
            "inputs": _canon(dict(inputs or {}), stage),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "files": [{"name": p.relative_to(tmp).as_posix(), "sha256": sha256_file(p),
                       "size": p.stat().st_size} for p in files],
        }
        atomic_write_json(tmp / MANIFEST, manifest, durable=False)
        final = self.entry_dir(stage, key)
        for _ in range(2):
            try:
                os.rename(tmp, final)
                log.debug("stage cache stored: %s %s", stage, key[:12])
                self._log_event("stored", stage, key)
                return final
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise self._root_error(e, final) from e
            if not self.enabled:
                self._discard(final, "old")  # private scratch: the fresh result wins
            elif self._lookup(stage, key, locked=True) is not None:
                log.debug("stage cache: %s %s was stored by another process; keeping "
                          "theirs", stage, key[:12])
                return final
            # the old entry was corrupt and has been removed: try once more
        raise ConfigError("could not store a stage cache entry", where=str(final),
                          fix="remove that directory and rerun")

    def _discard(self, entry: Path, why: str) -> None:
        """Rename ``entry`` aside (atomic, so readers never see it half-deleted), then delete."""
        aside = entry.with_name(f".{why}-{entry.name}-{os.getpid()}-{time.monotonic_ns()}")
        try:
            os.rename(entry, aside)
        except FileNotFoundError:
            return  # another process moved it already
        except OSError:
            shutil.rmtree(entry, ignore_errors=True)
            aside = None
        if self.enabled:
            self._log_event("removed", entry.parent.parent.name, entry.name, why=why)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)

    def _log_event(self, event: str, stage: str, key: str, **extra: str) -> None:
        """Append one line to ``root/log.jsonl`` (one ``write`` on an O_APPEND file, under
        the key's lock). The log informs; failing to write it never fails the stage."""
        if not self.enabled:
            return
        line = _canonical_json({"event": event, "stage": stage, "key": key, "host": _HOST,
                                "pid": os.getpid(),
                                "time": datetime.now(timezone.utc).isoformat(
                                    timespec="milliseconds"), **extra}) + "\n"
        try:
            fd = os.open(self.root / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("ascii"))
            finally:
                os.close(fd)
        except OSError as e:
            log.warning("stage cache log %s not written (%s); the entry is stored",
                        self.root / LOG_NAME, e.strerror or e)


_PF_EXITING = 0x4  # Linux task flag: set when do_exit() starts, before it closes files


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host. A zombie (killed, not yet reaped by its
    parent) is dead: its locks are released already, so its staging directory is debris.
    So is a process still inside exit (PF_EXITING): the kernel closes its files -- and
    releases its locks, waking a waiter -- before it turns the task into a zombie."""
    try:
        return _stat_says_running(Path(f"/proc/{pid}/stat").read_text())
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False
    except (OSError, IndexError, ValueError):
        pass
    try:  # no /proc: ask the kernel
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _stat_says_running(stat: str) -> bool:
    """Read a ``/proc/<pid>/stat`` line: not a zombie / dead task, not exiting."""
    fields = stat.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    return fields[0] not in ("Z", "X", "x") and not int(fields[6]) & _PF_EXITING


def _save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Like ``np.savez`` (same .npz, read by ``np.load``) but never pickles, any key names."""
    with atomic_path(path, durable=False) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, value in arrays.items():
                a = np.asanyarray(value)
                if not isinstance(name, str) or not name or a.dtype.hasobject:
                    raise DataError("stage cache arrays must be numeric with string names",
                                    where=str(path), value=f"{name!r}: {a.dtype}",
                                    fix="convert object arrays to numeric arrays")
                with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, a, allow_pickle=False)


#: Public name for stage code that writes arrays into a ``get_or_compute`` directory.
save_arrays = _save_arrays
