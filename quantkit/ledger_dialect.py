"""Where the test ledger's two backends differ, and nothing else: a SQLite file (one host) and
a PostgreSQL database (a team ledger on a server, through psycopg 3).

The store (quantkit/ledger_store.py), its tables (quantkit/ledger_schema.py), its rows
(quantkit/ledger_rows.py) and export / import (quantkit/ledger_transfer.py) are written once,
against :class:`LedgerConnection`; a :class:`Dialect` supplies:

* the connection: sqlite3 on a file (WAL, ``synchronous=FULL``, a busy timeout) or psycopg
  on a URL (autocommit outside the store's own transactions, ``lock_timeout``, read committed);
* parameters: the store writes ``?``; psycopg takes ``%s``;
* column types: BLOB / BYTEA; REAL (8 bytes in SQLite) / DOUBLE PRECISION (PostgreSQL's REAL
  is 4 bytes: an alpha would not read back equal); SQLite's ``WITHOUT ROWID``;
* insertion order: SQLite's implicit ``rowid``; PostgreSQL has none, so the tables read in
  insertion order (looks, models, look_checks) get an explicit identity column named
  ``rowid`` and ``ORDER BY rowid`` reads the same on both. Every write holds the ledger's one
  write lock, so that order is the order of commits;
* the write lock: ``BEGIN IMMEDIATE`` / ``BEGIN`` then ``pg_advisory_xact_lock``
  (:data:`PG_LOCK_KEY`): one writer at a time per ledger database, readers never wait, and
  at read committed every statement after the lock sees each earlier writer's commit: the
  same serial order of reservations as SQLite's. A writer that dies (a killed run) loses its
  connection, and the server rolls its transaction back and frees the lock;
* which errors mean "another run holds the lock too long": SQLITE_BUSY / SQLITE_LOCKED, or
  lock_not_available (``lock_timeout`` ran out), serialization_failure, deadlock_detected;
* listing tables: ``sqlite_master`` / ``pg_tables`` of the current schema.

A database URL (``postgresql://user:password@host:port/db`` or ``postgres://``) may hold a
password: :func:`mask_url` is what every record, report, log line and error shows.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from quantkit.errors import LedgerError

__all__ = ["DATABASE_SCHEMES", "Dialect", "LedgerConnection", "PG_LOCK_KEY", "PIP_POSTGRES",
           "PostgresDialect", "SqliteDialect", "dialect_for", "is_database_url",
           "mask_secrets", "mask_url"]

#: the URL schemes of a team ledger (libpq reads both)
DATABASE_SCHEMES = ("postgresql", "postgres")
#: what installs the PostgreSQL driver
PIP_POSTGRES = ("pip install 'psycopg[binary]>=3.2,<4' (quantkit's ledger-postgres extra: "
                "pip install -e '.[ledger-postgres]' in its checkout)")
#: pg_advisory_xact_lock key of the ledger's write lock: the first 8 bytes of
#: sha256("quantkit-test-ledger"), as a signed 64-bit integer
PG_LOCK_KEY = int.from_bytes(hashlib.sha256(b"quantkit-test-ledger").digest()[:8], "big",
                             signed=True)
_MASK = "***"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_IN_TEXT = re.compile(r"((?:postgresql|postgres)://[^\s:/@]*:)([^\s@/]*)(@)")
_PW_PARAM = re.compile(r"(\bpassword=)([^&\s]*)")


def is_database_url(value: str | os.PathLike | None) -> bool:
    """Whether ``value`` is a URL (``scheme://...``) rather than a file path."""
    return isinstance(value, str) and bool(_URL.match(value.strip()))


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or a ``password=`` parameter) as ***."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":" + _MASK
        netloc = f"{user}@{host}"
    query = parts.query
    if re.search(r"(^|&)password=", query):
        query = urlencode([(k, _MASK if k == "password" else v)
                           for k, v in parse_qsl(query, keep_blank_values=True)], safe="*/")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def mask_secrets(text: str) -> str:
    """Every database URL's password in ``text`` (a command line, a message) as ***."""
    return _PW_PARAM.sub(lambda m: m.group(1) + _MASK, _IN_TEXT.sub(
        lambda m: m.group(1) + _MASK + m.group(3), text))


def _without_masked_password(url: str) -> str:
    """``url`` less a password that reads ``***`` (a URL copied from a record or a report):
    libpq then takes the password from PGPASSWORD or ~/.pgpass."""
    parts = urlsplit(url)
    netloc = parts.netloc
    user, at, host = netloc.rpartition("@")
    if at and user.endswith(":" + _MASK):
        netloc = f"{user[:-len(_MASK) - 1]}@{host}"
    query = parts.query
    if f"password={_MASK}" in query:
        query = "&".join(q for q in query.split("&") if q != f"password={_MASK}")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class LedgerConnection:
    """One open ledger connection, as the store uses it: ``execute`` / ``executemany`` with
    ``?`` parameters, the write transaction, the tables. Same calls on both backends."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; returns the driver's cursor (fetchone, fetchall, rowcount,
        description)."""
        return self.dialect.execute(self.raw, sql, tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.dialect.executemany(self.raw, sql, rows)

    def begin(self) -> None:
        """Start the one write transaction (waits for the ledger's write lock)."""
        self.dialect.begin_write(self)

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        """Roll back; a connection already gone (its transaction rolled back with it) is
        not a second error over the first."""
        try:
            self.raw.execute("ROLLBACK")
        except self.dialect.Error:
            pass

    def tables(self) -> set[str]:
        return self.dialect.tables(self)

    def close(self) -> None:
        self.raw.close()


class Dialect:
    """What one backend does its own way (module docstring). ``shown``: the ledger as every
    message and record names it (a file path, or a URL with its password masked)."""

    name = ""
    Error: type[BaseException] = Exception  # the driver's base error
    #: the DDL's placeholders (quantkit/ledger_schema.py)
    types: dict[str, str] = {}
    #: what a driver error that is not "locked" says about the ledger, and its fix
    unreadable = ""
    fix = ""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def open(self, *, create: bool, timeout_s: float) -> LedgerConnection:
        raise NotImplementedError

    def prepare(self, con: LedgerConnection, timeout_s: float) -> None:
        """Session settings, inside the store's error handling (a lock here is "busy")."""

    def execute(self, raw: Any, sql: str, params: tuple) -> Any:
        return raw.execute(sql, params)

    def executemany(self, raw: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raw.executemany(sql, rows)

    def begin_write(self, con: LedgerConnection) -> None:
        raise NotImplementedError

    def busy(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def tables(self, con: LedgerConnection) -> set[str]:
        raise NotImplementedError

    def scrub(self, text: str) -> str:
        """A driver message as it may be shown (no secret in it)."""
        return text

    def error(self, what: str, exc: BaseException | None = None, fix: str | None = None
              ) -> LedgerError:
        detail = f" ({' '.join(self.scrub(str(exc)).split())})" if exc is not None else ""
        return LedgerError(what + detail, where=self.shown, fix=fix or self.fix)


class SqliteDialect(Dialect):
    """A ledger in one SQLite file (WAL: not over NFS)."""

    name = "sqlite"
    Error = sqlite3.DatabaseError
    types = {"blob": "BLOB", "real": "REAL", "rowid": "", "without_rowid": " WITHOUT ROWID"}
    unreadable = "the test ledger is not a readable quantkit ledger (corrupt?)"
    fix = ("move the file aside (its looks are then unknown to later runs: say so to the "
           "reviewer) or point verdict.ledger at the intact ledger")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path).expanduser()
        super().__init__(str(self.path))

    def open(self, *, create: bool, timeout_s: float) -> LedgerConnection:
        if not self.path.exists():
            if not create:
                raise LedgerError("no test ledger here", where=self.shown,
                                  fix="run a sign-off first (python -m quantkit ...), or name "
                                      "the ledger with --db <path> (verdict.ledger)")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self.error("cannot create the test ledger's directory", exc,
                                 fix="set verdict.ledger to a writable local file") from exc
        elif not self.path.is_file():
            raise self.error("the test ledger path is not a file",
                             fix="set verdict.ledger to a file path, e.g. <dir>/ledger.sqlite")
        try:
            raw = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise self.error("cannot open the test ledger", exc,
                             fix="check that the path is a writable local file") from exc
        return LedgerConnection(raw, self)

    def prepare(self, con: LedgerConnection, timeout_s: float) -> None:
        con.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        mode = self._journal_wal(con, timeout_s)
        if str(mode).lower() != "wal":
            raise self.error(f"the test ledger cannot use WAL journaling (mode {mode})",
                             fix="put verdict.ledger on a local file system")
        con.execute("PRAGMA synchronous = FULL")
        con.execute("PRAGMA foreign_keys = ON")

    def _journal_wal(self, con: LedgerConnection, timeout_s: float) -> str:
        """Switch to WAL and return the journal mode. Turning a new (rollback-journal) file
        into WAL reads and then upgrades to a write lock; SQLite answers "database is locked"
        at once, without the busy handler, when another run holds the write lock meanwhile
        (two jobs opening a new ledger together), so this retries until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return str(con.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if not self.busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def begin_write(self, con: LedgerConnection) -> None:
        con.execute("BEGIN IMMEDIATE")

    def busy(self, exc: BaseException) -> bool:
        """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock (not corruption)."""
        if not isinstance(exc, sqlite3.OperationalError):
            return False
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        return "locked" in str(exc) or "busy" in str(exc)

    def tables(self, con: LedgerConnection) -> set[str]:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


#: SQLSTATEs of "another transaction is in the way": lock_not_available (lock_timeout),
#: serialization_failure, deadlock_detected
_PG_BUSY = ("55P03", "40001", "40P01")


class PostgresDialect(Dialect):
    """A team ledger in a PostgreSQL database (its current schema holds only the ledger)."""

    name = "postgresql"
    types = {"blob": "BYTEA", "real": "DOUBLE PRECISION",
             "rowid": "rowid BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE, ", "without_rowid": ""}
    unreadable = "the team ledger's database failed"
    fix = ("check that the server is up and the URL's database is a quantkit ledger (or an "
           "empty database), or point verdict.ledger at the intact ledger")

    def __init__(self, url: str) -> None:
        self.url = _without_masked_password(url.strip())
        parts = urlsplit(self.url)
        self._secrets = [s for s in (parts.password, dict(parse_qsl(parts.query)).get(
            "password")) if s]
        super().__init__(mask_url(self.url))
        try:
            import psycopg  # optional: quantkit[ledger-postgres]
        except ImportError as exc:
            raise LedgerError(f"the test ledger is a PostgreSQL database and its driver, "
                              f"psycopg 3, is not installed ({exc})", where=self.shown,
                              fix=PIP_POSTGRES) from exc
        self._psycopg = psycopg
        self.Error = psycopg.Error

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, _MASK)
        return mask_secrets(text)

    def open(self, *, create: bool, timeout_s: float) -> LedgerConnection:
        try:
            raw = self._psycopg.connect(self.url, autocommit=True, application_name="quantkit",
                                        connect_timeout=int(max(2, min(timeout_s, 30))))
        except self._psycopg.Error as exc:
            raise self.error("cannot connect to the team ledger", exc,
                             fix="check the URL, that the server is up and reachable, and the "
                                 "password (PGPASSWORD or ~/.pgpass)") from exc
        return LedgerConnection(raw, self)

    def prepare(self, con: LedgerConnection, timeout_s: float) -> None:
        con.raw.execute(f"SET lock_timeout = {int(timeout_s * 1000)}")
        con.raw.execute("SET default_transaction_isolation = 'read committed'")

    def execute(self, raw: Any, sql: str, params: tuple) -> Any:
        if not params:
            return raw.execute(sql)
        return raw.execute(sql.replace("%", "%%").replace("?", "%s"), params)

    def executemany(self, raw: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with raw.cursor() as cur:
            cur.executemany(sql.replace("%", "%%").replace("?", "%s"), list(rows))

    def begin_write(self, con: LedgerConnection) -> None:
        con.raw.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        con.raw.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK_KEY,))

    def busy(self, exc: BaseException) -> bool:
        return getattr(exc, "sqlstate", None) in _PG_BUSY

    def tables(self, con: LedgerConnection) -> set[str]:
        return {r[0] for r in con.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}


def dialect_for(target: str | os.PathLike) -> Dialect:
    """The dialect of a ledger: a ``postgresql://`` / ``postgres://`` URL, else a file path.
    Another URL scheme is one LedgerError."""
    if is_database_url(target):
        scheme = str(target).strip().split("://", 1)[0].lower()
        if scheme not in DATABASE_SCHEMES:
            raise LedgerError(f"a test ledger URL must be PostgreSQL's "
                              f"({' or '.join(s + '://' for s in DATABASE_SCHEMES)})",
                              value=mask_secrets(str(target)),
                              fix="e.g. verdict.ledger=postgresql://user@host:5432/quantkit, "
                                  "or a SQLite file path")
        return PostgresDialect(str(target))
    return SqliteDialect(target)
