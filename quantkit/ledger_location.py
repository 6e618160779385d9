"""Where the persistent test ledger lives: apart from every cache, so that clearing or moving
a cache (``cache_dir``, ``$QUANTKIT_CACHE``, a fresh CI container's) forgets no look.

* ``verdict.ledger=<file>``: that file (a team's on one host's local disk);
* ``verdict.ledger=postgresql://user@host:port/db`` (or ``postgres://``): a team ledger in
  that PostgreSQL database (quantkit/ledger_dialect.py), the same tables and rules; shown
  everywhere with its password masked;
* ``verdict.ledger_path=<file>``: the same, under its old name. Kept as a deprecated alias,
  not migrated: the command lines, sweep configs and CI scripts that name a ledger this way
  keep reaching the very file that holds their looks (a silent switch to the default would
  forget them; refusing the key would break them for a rename), and a log line says to
  rename it;
* neither: ``$XDG_DATA_HOME/quantkit/ledger.sqlite``, or
  ``~/.local/share/quantkit/ledger.sqlite`` where ``XDG_DATA_HOME`` is unset, empty or
  relative (the XDG base directory rule).

Before this default existed the ledger was ``<cache_dir>/ledger.sqlite``. A run that finds
such a file while the default ledger does not exist yet copies it there once
(:func:`adopt_legacy`), so an upgrade keeps the looks; when both exist, a log line names
the cache's file and how to keep counting its looks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from quantkit.errors import LedgerError
from quantkit.ledger_dialect import is_database_url, mask_url

__all__ = ["DEFAULT_NAME", "LedgerLocation", "adopt_legacy", "default_ledger",
           "ledger_location", "user_data_dir"]

log = logging.getLogger(__name__)

DEFAULT_NAME = "ledger.sqlite"


def user_data_dir() -> Path:
    """``$XDG_DATA_HOME``, else ``~/.local/share`` (an unset, empty or relative value is
    ignored, as the XDG base directory specification says)."""
    given = os.environ.get("XDG_DATA_HOME", "")
    if given and os.path.isabs(given):
        return Path(given)
    return Path.home() / ".local" / "share"


def default_ledger() -> Path:
    """The ledger a run uses when none is named: the user data dir's quantkit/ledger.sqlite."""
    return user_data_dir() / "quantkit" / DEFAULT_NAME


@dataclass(frozen=True)
class LedgerLocation:
    """The ledger and which setting chose it (``chosen_by``: ``verdict.ledger``,
    ``verdict.ledger_path (deprecated)``, or ``default``): a file (``path``), or a database
    URL (``url``, ``path`` None; it may hold a password: never shown, see :attr:`shown`)."""

    path: Path | None
    chosen_by: str
    url: str | None = field(default=None, repr=False)

    @property
    def target(self) -> Path | str:
        """What :class:`quantkit.ledger_store.LedgerStore` opens."""
        return self.url if self.url else self.path

    @property
    def shown(self) -> str:
        """The ledger as records, reports, logs and errors name it (a URL's password
        masked)."""
        return mask_url(self.url) if self.url else str(self.path)

    def describe(self) -> str:
        return self.shown if self.chosen_by != "default" else \
            f"{self.path} (the default: the user data dir)"


def ledger_location(settings, *, quiet: bool = False) -> LedgerLocation:
    """The run's ledger (module docstring); logs the deprecation of ``verdict.ledger_path``
    (``quiet``: not again, the preflight said it)."""
    v = settings.verdict
    if v.ledger and is_database_url(v.ledger):
        return LedgerLocation(None, "verdict.ledger", url=str(v.ledger).strip())
    if v.ledger:
        return LedgerLocation(Path(v.ledger).expanduser().resolve(), "verdict.ledger")
    if v.ledger_path:
        if not quiet:
            log.warning("verdict.ledger_path is deprecated: name the test ledger with "
                        "verdict.ledger=%s (the same file is used)", v.ledger_path)
        return LedgerLocation(Path(v.ledger_path).expanduser().resolve(),
                              "verdict.ledger_path (deprecated)")
    return LedgerLocation(default_ledger().resolve(), "default")


def _copy(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite file ``source`` at ``target`` (SQLite's backup API:
    safe while another run writes the source), published by one rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.adopt-{os.getpid()}")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src, \
                contextlib.closing(sqlite3.connect(str(tmp))) as dst:
            src.backup(dst)
        try:
            os.link(tmp, target)  # atomic and never over a ledger another run just made
        except FileExistsError:
            pass
        tmp.unlink()
    except (OSError, sqlite3.Error) as exc:
        tmp.unlink(missing_ok=True)
        raise LedgerError(f"cannot copy the cache's test ledger to the default place ({exc})",
                          where=str(source), value=str(target),
                          fix=f"copy it by hand (cp {source} {target}) or name it with "
                              f"verdict.ledger={source}") from exc


def _is_ledger(path: Path) -> bool:
    """Whether ``path`` reads as a quantkit test ledger (any layout)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.Error:
        return False
    return bool(row) and str(row[0]).startswith("quantkit-test-ledger/")


def _look_ids(path: Path) -> set[str]:
    """The look ids a ledger file holds (empty where it is not a readable ledger)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            return {r[0] for r in con.execute("SELECT id FROM looks")}
    except sqlite3.Error:
        return set()


def adopt_legacy(location: LedgerLocation, cache_dir: str | os.PathLike) -> Path | None:
    """Copy ``<cache_dir>/ledger.sqlite`` (where ledgers were kept before) to the default
    ledger when that does not exist yet; returns the file copied, else None. Only for the
    default location: a named ledger is the user's choice."""
    legacy = Path(cache_dir).expanduser().resolve() / DEFAULT_NAME
    if location.chosen_by != "default" or not legacy.is_file() or legacy == location.path:
        return None
    if not _is_ledger(legacy):
        log.warning("test ledger: %s is not a quantkit test ledger; not copied (the ledger is "
                    "%s)", legacy, location.path)
        return None
    if location.path.exists():
        missing = _look_ids(legacy) - _look_ids(location.path)
        if missing:
            log.warning("test ledger: %s (kept in the cache before the ledger moved to %s) "
                        "holds %d look(s) that %s does not; they are not counted: to count "
                        "them, name that file with verdict.ledger=%s", legacy, location.path,
                        len(missing), location.path, legacy)
        return None
    _copy(legacy, location.path)
    log.warning("test ledger: copied %s (the cache's ledger of earlier quantkit versions) to "
                "%s, where the ledger is kept now, apart from any cache", legacy, location.path)
    return legacy
