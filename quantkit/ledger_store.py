"""The persistent test ledger: every look at the test split, kept in SQLite across runs.

What a look is, which earlier looks it is charged against and the alpha it gets are
:mod:`quantkit.verdict.ledger` (pure); this module only keeps them. Default file:
``<cache_dir>/ledger.sqlite``; ``verdict.ledger_path`` names another (e.g. one a team
shares on one host's local disk: SQLite's WAL mode needs a local file system, not NFS).

Layout (``meta.schema`` = :data:`SCHEMA`)::

    meta(key, value)                          schema version, rule of the first writer
    example_sets(id, n)                       id = sha256 of the sorted distinct example hashes
    set_examples(set_id, hash)                one row per distinct example of a set
    looks(id, model_key, model_sha256, number, lineage, example_set, ..., state, alpha, ...)
    look_members(look_id, candidate, ...)     each tested member's verdict in that look

Concurrency: WAL journal, a busy timeout of :data:`BUSY_TIMEOUT_S`, ``synchronous=FULL``.
A look is **reserved** in one ``BEGIN IMMEDIATE`` transaction before any test output is
read: the overlap with earlier looks, the lineage, the look's number and alpha, and the
family declared at that alpha are written together, so two concurrent runs get different
numbers and their alphas sum within the budget. The decision is written in a second
transaction (**decided**). A look reserved and never decided (the run stopped) stays
charged. A run whose :func:`~quantkit.verdict.ledger.decision_key` equals an earlier look's
reads that look's decision (decided) or completes it (reserved: the decision is a
deterministic function of the key, so finishing it adds no look). Plain SQL rows and JSON
text only; no pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from quantkit.errors import LedgerError
from quantkit.verdict.ledger import LookAlpha, SpentLook, join_lineages, look_alpha

__all__ = ["BUSY_TIMEOUT_S", "DEFAULT_NAME", "LedgerStore", "Look", "Reservation", "SCHEMA",
           "example_hashes", "ledger_path"]

log = logging.getLogger(__name__)

SCHEMA = "quantkit-test-ledger/1"
DEFAULT_NAME = "ledger.sqlite"
#: how long a writer waits for another's transaction (a reservation plans power: seconds)
BUSY_TIMEOUT_S = 300.0

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS example_sets (id TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS set_examples (
    set_id TEXT NOT NULL REFERENCES example_sets(id), hash BLOB NOT NULL,
    PRIMARY KEY (set_id, hash)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS set_examples_hash ON set_examples(hash, set_id);
CREATE TABLE IF NOT EXISTS looks (
    id TEXT PRIMARY KEY, model_key TEXT NOT NULL, model_sha256 TEXT NOT NULL,
    number INTEGER NOT NULL,
    lineage TEXT NOT NULL, example_set TEXT NOT NULL REFERENCES example_sets(id),
    n_examples INTEGER NOT NULL, split_sha256 TEXT NOT NULL, decision_key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'decided')),
    alpha REAL NOT NULL, alpha_declared REAL NOT NULL, budget REAL NOT NULL,
    spent_before REAL NOT NULL, share REAL NOT NULL, rule TEXT NOT NULL,
    family_sha256 TEXT NOT NULL, method TEXT NOT NULL, metric TEXT NOT NULL,
    candidates TEXT NOT NULL, supersedes TEXT, started TEXT NOT NULL, decided TEXT,
    run_dir TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    family_json TEXT NOT NULL, plan_json TEXT NOT NULL, facts_json TEXT NOT NULL,
    earlier_json TEXT NOT NULL, other_data_looks INTEGER NOT NULL, decision_json TEXT);
CREATE INDEX IF NOT EXISTS looks_model ON looks(model_key, lineage);
CREATE INDEX IF NOT EXISTS looks_key ON looks(model_key, decision_key);
CREATE INDEX IF NOT EXISTS looks_set ON looks(example_set);
CREATE TABLE IF NOT EXISTS look_members (
    look_id TEXT NOT NULL REFERENCES looks(id), candidate TEXT NOT NULL,
    position INTEGER NOT NULL, artifact_sha256 TEXT, metric TEXT, status TEXT NOT NULL,
    raw_status TEXT, point REAL, low REAL, high REAL, p_noninferiority REAL,
    PRIMARY KEY (look_id, candidate));
"""


def ledger_path(settings, cache_dir: str | os.PathLike) -> Path:
    """``verdict.ledger_path`` (``~`` expanded), else ``<cache_dir>/ledger.sqlite``."""
    given = getattr(settings.verdict, "ledger_path", None)
    return (Path(given).expanduser() if given else Path(cache_dir) / DEFAULT_NAME).resolve()


def example_hashes(split) -> list[bytes]:
    """sha256 of each example's input (text: UTF-8; image: dtype, shape, pixels; a split that
    hashes its own examples, a detector's image files: their bytes), in order.

    Labels are not hashed (:mod:`quantkit.verdict.ledger`: what "the same example" means)."""
    own = getattr(split, "example_hashes", None)  # a detector's image files: their bytes
    if callable(own):
        return list(own())
    texts = getattr(split, "texts", None)
    if texts is not None:
        return [hashlib.sha256(b"text\x1f" + str(t).encode("utf-8")).digest() for t in texts]
    images = getattr(split, "images", None)
    if images is None:
        raise LedgerError("the test ledger cannot hash this split's examples",
                          where="ledger_store.example_hashes", value=type(split).__name__,
                          fix="pass a TextSplit or an ImageSplit")
    out = []
    for x in np.asarray(images):
        x = np.ascontiguousarray(x)
        h = hashlib.sha256(f"image\x1f{x.dtype.str}{x.shape}".encode())
        h.update(x.reshape(-1).view(np.uint8) if x.size else b"")
        out.append(h.digest())
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _loads(text: str | None, default: Any) -> Any:
    return default if text is None else json.loads(text)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


@dataclass(frozen=True)
class Look:
    """One look as the ledger holds it (``earlier``: the lineage's looks when it was
    reserved, each with its alpha, family, statuses and examples shared with this one)."""

    id: str
    model_key: str  # quantkit.verdict.ledger.model_key: the model the look is about
    model_sha256: str  # the prepared FP32 file's sha256 (record.model.sha256)
    number: int
    lineage: str
    example_set: str
    n_examples: int
    split_sha256: str
    decision_key: str
    state: str
    alpha: LookAlpha
    family_sha256: str
    method: str
    metric: str
    candidates: tuple[str, ...]
    supersedes: str | None
    started: str
    decided: str | None
    run_dir: str
    host: str
    pid: int
    family: dict[str, Any]
    plan: dict[str, Any]
    facts: dict[str, Any]
    earlier: tuple[dict[str, Any], ...]
    other_data_looks: int
    decision: dict[str, Any] | None
    members: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def statuses(self) -> dict[str, str]:
        return {m["candidate"]: m["status"] for m in self.members}

    def summary(self) -> dict[str, Any]:
        """The short form other looks' records list this look by."""
        return {"id": self.id, "look": self.number, "started": self.started,
                "state": self.state, "alpha_one_sided": self.alpha.alpha,
                "alpha_declared": self.alpha.alpha_declared, "n_examples": self.n_examples,
                "candidates": list(self.candidates), "method": self.method,
                "metric": self.metric, "statuses": self.statuses(),
                "supersedes": self.supersedes, "run_dir": self.run_dir}


@dataclass(frozen=True)
class Reservation:
    """What :meth:`LedgerStore.reserve` found or made.

    ``kind``: ``new`` (a new look, charged), ``adopted`` (an identical look reserved by
    another run and not yet decided: this run completes it), ``read`` (an identical look
    already decided: its decision stands, nothing is charged), ``none`` (the planner tested
    no member: no look; ``look`` is None and ``alpha`` is what it would have had).
    """

    kind: str
    path: Path
    alpha: LookAlpha
    look: Look | None = None
    planned: Any = None  # what the planner returned (new / adopted)
    earlier: tuple[dict[str, Any], ...] = ()  # kind none: the lineage's looks it would join


class _NoLook(Exception):
    """Raised inside the reservation transaction to roll it back (the planner tested none)."""

    def __init__(self, reservation: Reservation) -> None:
        super().__init__("no look")
        self.reservation = reservation


def _busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock (not corruption)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class LedgerStore:
    """The SQLite test ledger at ``path`` (created on first use unless ``create=False``)."""

    def __init__(self, path: str | os.PathLike, *, create: bool = True,
                 timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.create = create
        self.timeout_s = float(timeout_s)

    # -- connection ---------------------------------------------------------------------
    def _error(self, what: str, exc: BaseException | None = None, fix: str | None = None
               ) -> LedgerError:
        detail = f" ({exc})" if exc is not None else ""
        return LedgerError(what + detail, where=str(self.path), fix=fix or (
            "move the file aside (its looks are then unknown to later runs: say so to the "
            "reviewer) or point verdict.ledger_path at the intact ledger"))

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():
            if not self.create:
                raise LedgerError("no test ledger here", where=str(self.path),
                                  fix="run a sign-off first (python -m quantkit ...), or name "
                                      "the ledger with --db <path> (verdict.ledger_path)")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error("cannot create the test ledger's directory", exc,
                                  fix="set verdict.ledger_path to a writable local file") from exc
        elif not self.path.is_file():
            raise self._error("the test ledger path is not a file",
                              fix="set verdict.ledger_path to a file path, e.g. "
                                  "<dir>/ledger.sqlite")
        try:
            con = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._error("cannot open the test ledger", exc,
                              fix="check that the path is a writable local file") from exc
        try:
            con.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            mode = self._journal_wal(con)
            if str(mode).lower() != "wal":
                raise self._error(f"the test ledger cannot use WAL journaling (mode {mode})",
                                  fix="put verdict.ledger_path on a local file system")
            con.execute("PRAGMA synchronous = FULL")
            con.execute("PRAGMA foreign_keys = ON")
            self._check_schema(con)
            yield con
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                raise self._error(f"the test ledger stayed locked by another run for "
                                  f"{self.timeout_s:g} s", exc,
                                  fix="wait for the other run to finish, or give this run its "
                                      "own verdict.ledger_path") from exc
            raise self._error("the test ledger is not a readable quantkit ledger (corrupt?)",
                              exc) from exc
        except sqlite3.DatabaseError as exc:
            raise self._error("the test ledger is not a readable quantkit ledger (corrupt?)",
                              exc) from exc
        finally:
            con.close()

    def _journal_wal(self, con: sqlite3.Connection) -> str:
        """Switch to WAL and return the journal mode. Turning a new (rollback-journal) file
        into WAL reads and then upgrades to a write lock; SQLite answers "database is locked"
        at once, without the busy handler, when another run holds the write lock meanwhile
        (two jobs opening a new ledger together), so this retries until ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return str(con.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _check_schema(self, con: sqlite3.Connection) -> None:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "meta" not in tables:
            if tables:
                raise self._error("this SQLite file is not a quantkit test ledger "
                                  f"(tables {sorted(tables)})",
                                  fix="point verdict.ledger_path at a new file or the ledger")
            if not self.create:
                raise self._error("the test ledger is empty (no schema)")
            con.execute("BEGIN IMMEDIATE")
            try:
                for statement in _DDL.split(";"):
                    if statement.strip():
                        con.execute(statement)
                con.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA,))
                con.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (_now(),))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        schema = con.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if schema is None or schema[0] != SCHEMA:
            raise self._error(f"unknown test ledger schema {schema[0] if schema else None!r}",
                              fix=f"use a quantkit that writes {SCHEMA}, or a new "
                                  "verdict.ledger_path")

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any error)."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    # -- reading ------------------------------------------------------------------------
    def _look(self, con: sqlite3.Connection, row: sqlite3.Row | tuple) -> Look:
        cols = [d[0] for d in con.execute("SELECT * FROM looks LIMIT 0").description]
        r = dict(zip(cols, row))
        members = tuple(
            dict(zip(("candidate", "position", "artifact_sha256", "metric", "status",
                      "raw_status", "point", "low", "high", "p_noninferiority"), m))
            for m in con.execute("SELECT candidate, position, artifact_sha256, metric, status, "
                                 "raw_status, point, low, high, p_noninferiority FROM "
                                 "look_members WHERE look_id = ? ORDER BY position", (r["id"],)))
        alpha = LookAlpha(number=r["number"], alpha=r["alpha"], alpha_declared=r["alpha_declared"],
                          budget=r["budget"], spent_before=r["spent_before"], share=r["share"],
                          rule=r["rule"])
        return Look(id=r["id"], model_key=r["model_key"], model_sha256=r["model_sha256"],
                    number=r["number"],
                    lineage=r["lineage"], example_set=r["example_set"],
                    n_examples=r["n_examples"], split_sha256=r["split_sha256"],
                    decision_key=r["decision_key"], state=r["state"], alpha=alpha,
                    family_sha256=r["family_sha256"], method=r["method"], metric=r["metric"],
                    candidates=tuple(json.loads(r["candidates"])), supersedes=r["supersedes"],
                    started=r["started"], decided=r["decided"], run_dir=r["run_dir"],
                    host=r["host"], pid=r["pid"], family=json.loads(r["family_json"]),
                    plan=json.loads(r["plan_json"]), facts=json.loads(r["facts_json"]),
                    earlier=tuple(json.loads(r["earlier_json"])),
                    other_data_looks=r["other_data_looks"],
                    decision=_loads(r["decision_json"], None), members=members)

    def looks(self, model_prefix: str | None = None) -> list[Look]:
        """Every look (of the models whose sha256 starts with ``model_prefix``), oldest first."""
        with self._connect() as con:
            if model_prefix:
                p = model_prefix.lower() + "%"
                rows = con.execute("SELECT * FROM looks WHERE model_key LIKE ? OR model_sha256 "
                                   "LIKE ? ORDER BY rowid", (p, p)).fetchall()
            else:
                rows = con.execute("SELECT * FROM looks ORDER BY rowid").fetchall()
            return [self._look(con, r) for r in rows]

    def look(self, id_prefix: str) -> Look:
        """The look whose id starts with ``id_prefix`` (LedgerError if none or several)."""
        with self._connect() as con:
            return self._resolve(con, id_prefix)

    def _resolve(self, con: sqlite3.Connection, id_prefix: str) -> Look:
        p = str(id_prefix).lower()
        rows = con.execute("SELECT * FROM looks WHERE id LIKE ? LIMIT 2", (p + "%",)).fetchall()
        if not rows:
            raise LedgerError("no look with this id in the test ledger", where=str(self.path),
                              value=id_prefix, fix="copy the id from `quantkit ledger` or from "
                                                   "record.signoff.ledger.look_id")
        if len(rows) > 1:
            raise LedgerError("the look id prefix is ambiguous", where=str(self.path),
                              value=id_prefix, fix="give more characters of the look id")
        return self._look(con, rows[0])

    # -- writing ------------------------------------------------------------------------
    def _example_set(self, con: sqlite3.Connection, hashes: Sequence[bytes]) -> tuple[str, int]:
        distinct = sorted(set(hashes))
        set_id = hashlib.sha256(b"".join(distinct)).hexdigest()
        if con.execute("SELECT 1 FROM example_sets WHERE id = ?", (set_id,)).fetchone() is None:
            con.execute("INSERT INTO example_sets VALUES (?, ?)", (set_id, len(distinct)))
            con.executemany("INSERT INTO set_examples VALUES (?, ?)",
                            ((set_id, h) for h in distinct))
        return set_id, len(distinct)

    def _lineage(self, con: sqlite3.Connection, model: str, set_id: str,
                 supersedes: Look | None) -> tuple[str | None, dict[str, int]]:
        """The lineage this look joins (merging every lineage it overlaps) and the number of
        examples it shares with each overlapping look."""
        shared = {r[0]: int(r[1]) for r in con.execute(
            "SELECT l.id, COUNT(*) FROM set_examples a JOIN set_examples b ON b.hash = a.hash "
            "JOIN looks l ON l.example_set = b.set_id WHERE a.set_id = ? AND "
            "l.model_key = ? GROUP BY l.id", (set_id, model))}
        lineage_of = {r[0]: r[1] for r in con.execute(
            f"SELECT id, lineage FROM looks WHERE id IN ({','.join('?' * len(shared))})",
            tuple(shared))} if shared else {}
        first = {r[0]: r[1] for r in con.execute(
            "SELECT lineage, MIN(rowid) FROM looks WHERE model_key = ? GROUP BY lineage",
            (model,))}
        target, merged = join_lineages(lineage_of, shared, first,
                                       supersedes.lineage if supersedes is not None else None)
        for lin in merged:
            con.execute("UPDATE looks SET lineage = ? WHERE model_key = ? AND lineage = ?",
                        (target, model, lin))
        return target, shared

    def reserve(self, *, model_key: str, examples: Sequence[bytes], split_sha256: str,
                decision_key: str, alpha_declared: float, supersedes: str | None,
                planner: Callable[[LookAlpha], dict[str, Any] | None], run_dir: str = "",
                facts: dict[str, Any] | None = None,
                model_sha256: str | None = None) -> Reservation:
        """Read, adopt or reserve the look of ``decision_key`` (class docstring).

        ``planner(alpha)`` declares the family at the look's alpha and plans its power; it
        returns None when no member is to be tested (no look is written), else a dict with
        ``family`` (SignoffFamily.to_dict()), ``plan`` (FamilyPlan.to_dict()), ``metric`` and
        optionally ``value`` (anything the caller needs back, not stored). It runs inside
        the write transaction, so the alpha it plans at is the alpha the look gets.
        """
        if not examples:
            raise LedgerError("a look needs the test examples", where="ledger reserve",
                              value=0, fix="sign off on a non-empty test split")
        try:
            return self._reserve(model_key=model_key, model_sha256=model_sha256 or model_key,
                                 examples=examples,
                                 split_sha256=split_sha256, decision_key=decision_key,
                                 alpha_declared=alpha_declared, supersedes=supersedes,
                                 planner=planner, run_dir=run_dir, facts=facts)
        except _NoLook as none:  # rolled back: no look, no merged lineage
            return none.reservation

    def _reserve(self, *, model_key: str, model_sha256: str, examples: Sequence[bytes],
                 split_sha256: str,
                 decision_key: str, alpha_declared: float, supersedes: str | None,
                 planner: Callable[[LookAlpha], dict[str, Any] | None], run_dir: str,
                 facts: dict[str, Any] | None) -> Reservation:
        with self._write() as con:
            same = con.execute("SELECT * FROM looks WHERE model_key = ? AND decision_key = ? "
                               "ORDER BY (state = 'decided') DESC, rowid LIMIT 1",
                               (model_key, decision_key)).fetchone()
            if same is not None:
                look = self._look(con, same)
                if look.state == "decided":
                    log.info("test ledger: identical to look %d (%s) of %s: its decision is "
                             "read, nothing is charged", look.number, look.id[:12], look.decided)
                    return Reservation("read", self.path, look.alpha, look)
                planned = planner(look.alpha)
                if planned is not None and planned["family"]["sha256"] == look.family_sha256:
                    log.info("test ledger: completing look %d (%s), reserved by another run "
                             "with the same inputs", look.number, look.id[:12])
                    return Reservation("adopted", self.path, look.alpha, look, planned)
            sup = self._resolve(con, supersedes) if supersedes else None
            if sup is not None and sup.model_key != model_key:
                raise LedgerError("verdict.supersedes names a look of another model",
                                  where=str(self.path), value=supersedes,
                                  fix=f"name a look of model {model_key[:12]} (`quantkit "
                                      f"ledger {model_key[:12]}`)")
            set_id, n = self._example_set(con, examples)
            lineage, shared = self._lineage(con, model_key, set_id, sup)
            earlier_rows = con.execute("SELECT * FROM looks WHERE model_key = ? AND "
                                       "lineage = ? ORDER BY rowid",
                                       (model_key, lineage)).fetchall() if lineage else []
            earlier = [self._look(con, r) for r in earlier_rows]
            alpha = look_alpha(alpha_declared, [SpentLook(e.alpha.alpha, e.alpha.alpha_declared)
                                                for e in earlier])
            earlier_summary = [{**e.summary(), "shared_examples": shared.get(e.id, 0),
                                "overlap": shared.get(e.id, 0) / n} for e in earlier]
            planned = planner(alpha)
            if planned is None:
                raise _NoLook(Reservation("none", self.path, alpha,
                                          earlier=tuple(earlier_summary)))
            family = planned["family"]
            look_id = secrets.token_hex(32)
            others = con.execute("SELECT COUNT(*) FROM looks WHERE model_key = ? AND "
                                 "lineage != ?", (model_key, lineage or look_id)).fetchone()[0]
            con.execute(
                "INSERT INTO looks VALUES (?,?,?,?,?,?,?,?,?,'reserved',?,?,?,?,?,?,?,?,?,?,?,?,"
                "NULL,?,?,?,?,?,?,?,?,NULL)",
                (look_id, model_key, model_sha256, alpha.number, lineage or look_id, set_id, n,
                 split_sha256, decision_key, alpha.alpha, alpha.alpha_declared, alpha.budget,
                 alpha.spent_before, alpha.share, alpha.rule, family["sha256"],
                 family.get("method", ""), str(planned.get("metric", "")),
                 json.dumps(list(family.get("candidates", []))), sup.id if sup else None,
                 _now(), str(run_dir), socket.gethostname(), os.getpid(), _dumps(family),
                 _dumps(planned.get("plan") or {}), _dumps(facts or {}),
                 _dumps(earlier_summary), int(others)))
            look = self._look(con, con.execute("SELECT * FROM looks WHERE id = ?",
                                               (look_id,)).fetchone())
        log.info("test ledger %s: %s", self.path, alpha.describe())
        return Reservation("new", self.path, alpha, look, planned)

    def complete(self, look_id: str, *, decision: dict[str, Any],
                 members: Sequence[dict[str, Any]]) -> tuple[Look, bool]:
        """Write the decision of a reserved look. Returns (look, True); if another run
        decided it first, (that look, False): the first decision stands."""
        with self._write() as con:
            row = con.execute("SELECT * FROM looks WHERE id = ?", (look_id,)).fetchone()
            if row is None:
                raise LedgerError("the look to complete is not in the test ledger",
                                  where=str(self.path), value=look_id,
                                  fix="do not edit or replace the ledger while a run signs off")
            look = self._look(con, row)
            if look.state == "decided":
                return look, False
            con.execute("UPDATE looks SET state = 'decided', decided = ?, decision_json = ? "
                        "WHERE id = ?", (_now(), _dumps(decision), look_id))
            con.executemany(
                "INSERT INTO look_members VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                ((look_id, m["candidate"], int(m["position"]), m.get("artifact_sha256"),
                  m.get("metric"), m["status"], m.get("raw_status"), m.get("point"),
                  m.get("low"), m.get("high"), m.get("p_noninferiority")) for m in members))
            look = self._look(con, con.execute("SELECT * FROM looks WHERE id = ?",
                                               (look_id,)).fetchone())
        return look, True
