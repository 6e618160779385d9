"""Atomic file writes: the one place quantkit writes files that readers must never see half-done.

Every writer goes through :func:`atomic_path`: a temp file in the target's directory (same
filesystem, so ``os.replace`` is atomic), made ``0o644 & ~umask`` (``mkstemp`` makes 0600),
fsync'ed when ``durable``, then renamed onto the target. On any failure the temp file is
removed and the target is untouched. An unwritable directory or a full disk becomes one
:class:`~quantkit.errors.ConfigError` that names the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from quantkit.errors import ConfigError

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json",
           "sha256_file", "current_umask", "ensure_dir", "is_disk_full", "write_error"]

log = logging.getLogger(__name__)

_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def is_disk_full(err: OSError, path: str | os.PathLike) -> bool:
    """True when ``err``, raised while writing ``path``, means the disk is full.

    ENOSPC / EDQUOT, or an ``OSError`` without errno (``ndarray.tofile`` under ``np.save``
    reports a short write that way) while ``path``'s filesystem has no free block left.
    """
    if err.errno in _DISK_FULL:
        return True
    if err.errno is not None:
        return False
    try:
        st = os.statvfs(Path(path).parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 4096


def write_error(err: OSError, path: str | os.PathLike) -> ConfigError:
    """The user-facing error for an ``OSError`` raised while writing ``path``."""
    reason = err.strerror or str(err) or type(err).__name__
    if is_disk_full(err, path):
        return ConfigError("disk full while writing a file", where=str(path), value=reason,
                           fix="free space on that disk or choose a directory on another disk")
    return ConfigError("cannot write a file", where=str(path), value=reason,
                       fix="choose a writable directory")


def ensure_dir(path: str | os.PathLike, *, key: str) -> Path:
    """Create directory ``path`` (and parents) and check a file can be written in it.

    ``key`` is the config key that set the path; a failure is one :class:`ConfigError`
    naming it, the path and the fix, before any work is done.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".quantkit-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if is_disk_full(e, path / "x"):
            raise write_error(e, path) from e
        raise ConfigError(f"the {key} directory cannot be created or written",
                          where=key, value=str(path),
                          fix=f"set {key} to a writable directory "
                              f"({e.strerror or type(e).__name__})") from e
    return path


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # fallback: read by setting; restored at once
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Persist a rename (best effort: some filesystems refuse fsync on directories)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_dead_temps(path: Path) -> None:
    """Remove temp files for ``path`` left by a process that was killed mid-write.

    Temp names are ``.<name>.<pid>.<random>.tmp<suffix>``; one whose pid no longer runs
    is garbage (on this host; a directory shared across hosts keeps them, harmlessly).
    """
    head = f".{path.name}."
    for p in path.parent.glob(f"{glob.escape(head)}*.tmp{glob.escape(path.suffix)}"):
        pid_text = p.name[len(head):].split(".", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            os.kill(int(pid_text), 0)
            continue  # alive (or the pid was reused): leave it
        except ProcessLookupError:
            pass
        except OSError:
            continue
        with contextlib.suppress(OSError):
            p.unlink()
            log.info("removed %s, left by a process that no longer runs", p)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = True) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it replaces ``path``, on failure it is removed.

    For writers that need a filename (``onnx.save``, ``np.save``). The temp name keeps the
    target's suffix, so writers that pick a format from the extension behave the same.
    A disk-full ``OSError`` raised by the writer becomes a :class:`ConfigError`; any other
    exception from the writer propagates unchanged.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_temps(path)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.",
                                        suffix=f".tmp{path.suffix}")
        os.close(fd)
    except OSError as e:
        raise write_error(e, path) from e
    tmp = Path(tmp_name)
    try:
        try:
            yield tmp
        except OSError as e:
            if is_disk_full(e, path):
                raise write_error(e, path) from e
            raise
        try:
            os.chmod(tmp, 0o644 & ~current_umask())
            if durable:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            raise write_error(e, path) from e
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        _fsync_dir(path.parent)
    log.debug("wrote %s", path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, durable: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path, durable=durable) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8",
                      durable: bool = True) -> Path:
    """Write ``text`` to ``path`` atomically (no newline translation); returns ``path``."""
    return atomic_write_bytes(path, text.encode(encoding), durable=durable)


def atomic_write_json(path: str | os.PathLike, obj: object, *, durable: bool = True) -> Path:
    """Write ``obj`` as JSON (indent 2, ``default=str``, trailing newline) atomically."""
    text = json.dumps(obj, indent=2, default=str) + "\n"
    return atomic_write_text(path, text, durable=durable)


def sha256_file(path: str | os.PathLike, *, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file's contents, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()
