"""The persistent test ledger: every look at the test split, kept across runs in a SQLite file
or, for a team, a PostgreSQL database (``verdict.ledger=postgresql://...``).

What a look is, which earlier looks it is charged against and the alpha it gets are
:mod:`quantkit.verdict.ledger` (pure); this module only keeps them. Where the ledger is:
:mod:`quantkit.ledger_location` (the user data dir by default, apart from every cache). The
tables and the upgrade of a first-layout file: :mod:`quantkit.ledger_schema`; its rows as
values (a look, an execution check, a reservation): :mod:`quantkit.ledger_rows`; moving looks
between ledgers: :mod:`quantkit.ledger_transfer`.

One store, one code path for both backends: every statement below runs as written on SQLite
and on PostgreSQL; what differs (connection, parameters, column types, insertion order, the
write lock, which errors mean "locked") is the connection's dialect,
:mod:`quantkit.ledger_dialect`.

Concurrency: one writer at a time (SQLite: WAL, ``BEGIN IMMEDIATE``, a busy timeout;
PostgreSQL: an advisory transaction lock, ``lock_timeout``), each waiting up to
:data:`BUSY_TIMEOUT_S`. A look is **reserved** in one write transaction before any test
output is read: the model's key (its fingerprint matched against the models the ledger
knows), the overlap with earlier looks, the lineage, the look's number and alpha, and the
family declared at that alpha are written together, so two concurrent runs get different
numbers and their alphas sum within the budget. The decision is written in a second
transaction (**decided**). A look reserved and never decided (the run stopped) stays
charged; a run killed inside a transaction leaves nothing of it (rolled back). A run
whose :func:`~quantkit.verdict.ledger.decision_key` equals an earlier look's reads that
look's decision (decided) or completes it (reserved: the decision is a deterministic
function of the key, so finishing it adds no look). A run whose
:func:`~quantkit.verdict.ledger.look_basis` and artifacts equal a decided look's is that
look's **execution check** (another backend): recorded in ``look_checks``, charged nothing.
Plain SQL rows and JSON text only; no pickle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from quantkit.errors import LedgerError
from quantkit.ledger_dialect import Dialect, LedgerConnection, dialect_for
from quantkit.ledger_rows import (CHECK_COLUMNS, MEMBER_COLUMNS, ExecutionCheck, Look,
                                  Reservation, checks_of, look_of)
from quantkit.ledger_schema import IDENTITY, SCHEMA, SCHEMA_V1, create, upgrade_v1
from quantkit.models.fingerprint import ModelFingerprint
from quantkit.verdict.ledger import LookAlpha, SpentLook, charged_lineage, join_lineages, look_alpha

__all__ = ["BUSY_TIMEOUT_S", "ExecutionCheck", "LedgerStore", "Look", "Reservation", "SCHEMA",
           "example_hashes", "example_set_id", "known_model"]

log = logging.getLogger(__name__)

#: how long a writer waits for another's transaction (a reservation plans power: seconds)
BUSY_TIMEOUT_S = 300.0


def example_hashes(split) -> list[bytes]:
    """Each test example's id, its source content before preprocessing, in order
    (quantkit/data/identity.py; what "the same example" means: quantkit/verdict/ledger.py)."""
    ids = getattr(split, "example_ids", None)
    if ids is None:
        raise LedgerError("the test ledger cannot identify this split's examples",
                          where="ledger_store.example_hashes", value=type(split).__name__,
                          fix="pass a TextSplit or an ImageSplit")
    return ids()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def example_set_id(distinct: Sequence[bytes]) -> str:
    """An example set's id: sha256 of its distinct example ids, sorted."""
    return hashlib.sha256(b"".join(sorted(distinct))).hexdigest()


def known_model(con: LedgerConnection, fingerprint: ModelFingerprint | None) -> str | None:
    """The key of the first model the ledger registered whose fingerprint matches, or None."""
    if fingerprint is None:
        return None
    for known, fp in con.execute("SELECT key, fingerprint_json FROM models WHERE "
                                 "weights_sha256 = ? ORDER BY rowid",
                                 (fingerprint.weights_sha256,)).fetchall():
        if fp and ModelFingerprint.from_dict(json.loads(fp)).matches(fingerprint):
            return known
    return None


class _NoLook(Exception):
    """Raised inside the reservation transaction to roll it back (the planner tested none)."""

    def __init__(self, reservation: Reservation) -> None:
        super().__init__("no look")
        self.reservation = reservation


class LedgerStore:
    """The test ledger at ``target``: a SQLite file path, or a ``postgresql://`` URL (a team
    ledger; its tables are created in the URL's database on first use unless
    ``create=False``, as a file is)."""

    def __init__(self, target: str | os.PathLike, *, create: bool = True,
                 timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.dialect: Dialect = dialect_for(target)
        #: the ledger as records, reports, logs and errors name it (no password)
        self.where = self.dialect.shown
        self.create = create
        self.timeout_s = float(timeout_s)

    @property
    def path(self):
        """The SQLite file (a Path), or the masked database URL (what records keep)."""
        return getattr(self.dialect, "path", self.where)

    # -- connection ---------------------------------------------------------------------
    def _error(self, what: str, exc: BaseException | None = None, fix: str | None = None
               ) -> LedgerError:
        return self.dialect.error(what, exc, fix)

    def check(self) -> None:
        """Open the ledger once (created where missing, a first-layout file upgraded): one
        LedgerError where it is not a quantkit ledger (the run's preflight)."""
        with self._connect():
            pass

    @contextlib.contextmanager
    def _connect(self) -> Iterator[LedgerConnection]:
        con = self.dialect.open(create=self.create, timeout_s=self.timeout_s)
        try:
            self.dialect.prepare(con, self.timeout_s)
            self._check_schema(con)
            yield con
        except self.dialect.Error as exc:
            if self.dialect.busy(exc):
                raise self._error(f"the test ledger stayed locked by another run for "
                                  f"{self.timeout_s:g} s", exc,
                                  fix="wait for the other run to finish, or give this run its "
                                      "own verdict.ledger") from exc
            raise self._error(self.dialect.unreadable, exc) from exc
        finally:
            con.close()

    @staticmethod
    def _schema(con: LedgerConnection) -> str | None:
        row = con.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        return row[0] if row else None

    def _check_schema(self, con: LedgerConnection) -> None:
        tables = con.tables()
        if "meta" not in tables:
            if tables:
                raise self._error(f"this {self.dialect.name} database is not a quantkit test "
                                  f"ledger (tables {sorted(tables)})",
                                  fix="point verdict.ledger at a new file or database, or "
                                      "the ledger")
            if not self.create:
                raise self._error("the test ledger is empty (no schema)")
            self._in_transaction(con, lambda: "meta" in con.tables(), lambda: create(con))
        if self._schema(con) == SCHEMA_V1:
            self._in_transaction(con, lambda: self._schema(con) != SCHEMA_V1,
                                 lambda: upgrade_v1(con))
            log.info("test ledger %s: upgraded from %s to %s (its looks kept)", self.where,
                     SCHEMA_V1, SCHEMA)
        schema = self._schema(con)
        if schema != SCHEMA:
            raise self._error(f"unknown test ledger schema {schema!r}",
                              fix=f"use a quantkit that writes {SCHEMA}, or a new "
                                  "verdict.ledger")

    @staticmethod
    def _in_transaction(con: LedgerConnection, done: Callable[[], bool],
                        step: Callable[[], None]) -> None:
        """``step()`` in one write transaction unless ``done()`` (another run did it first)."""
        con.begin()
        try:
            if not done():
                step()
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def transaction(self) -> contextlib.AbstractContextManager[LedgerConnection]:
        """One write transaction, as every write of the store runs: the ledger's write lock
        held, so the reads inside see one consistent ledger (export and import:
        quantkit/ledger_transfer.py); committed at the end, rolled back on any error."""
        return self._write()

    @contextlib.contextmanager
    def _write(self) -> Iterator[LedgerConnection]:
        """One write transaction (the ledger's write lock ... COMMIT; ROLLBACK on any
        error)."""
        with self._connect() as con:
            con.begin()
            try:
                yield con
            except BaseException:
                con.rollback()
                raise
            con.commit()

    # -- reading ------------------------------------------------------------------------
    def _look(self, con: LedgerConnection, row: tuple) -> Look:
        return look_of(con, row)

    def looks(self, model_prefix: str | None = None) -> list[Look]:
        """Every look (of the models whose key or file sha256 starts with ``model_prefix``),
        oldest first."""
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

    def checks(self, look_id: str) -> list[ExecutionCheck]:
        """The execution checks of a look, oldest first."""
        with self._connect() as con:
            return self._checks(con, look_id)

    @staticmethod
    def _checks(con: LedgerConnection, look_id: str) -> list[ExecutionCheck]:
        return checks_of(con, look_id)

    def _resolve(self, con: LedgerConnection, id_prefix: str) -> Look:
        p = str(id_prefix).lower()
        rows = con.execute("SELECT * FROM looks WHERE id LIKE ? LIMIT 2", (p + "%",)).fetchall()
        if not rows:
            raise LedgerError("no look with this id in the test ledger", where=self.where,
                              value=id_prefix, fix="copy the id from `quantkit ledger` or from "
                                                   "record.signoff.ledger.look_id")
        if len(rows) > 1:
            raise LedgerError("the look id prefix is ambiguous", where=self.where,
                              value=id_prefix, fix="give more characters of the look id")
        return self._look(con, rows[0])

    # -- models -------------------------------------------------------------------------
    def _model(self, con: LedgerConnection, key: str, basis: str,
               fingerprint: ModelFingerprint | None, model_sha256: str) -> str:
        """The key this model's looks are filed under: a fingerprint that matches a model the
        ledger knows gets that model's key; else ``key``, registered. First-layout looks of
        this very file (keyed by its sha256) are filed under it too."""
        key = known_model(con, fingerprint) or key
        con.execute("INSERT INTO models (key, basis, weights_sha256, fingerprint_json, "
                    "first_seen) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, basis, fingerprint.weights_sha256 if fingerprint else None,
                     _dumps(fingerprint.to_dict()) if fingerprint else None, _now()))
        if key != model_sha256:
            moved = con.execute("UPDATE looks SET model_key = ? WHERE model_key = ? AND "
                                "model_sha256 = ? AND identity = ?",
                                (key, model_sha256, model_sha256, SCHEMA_V1)).rowcount
            if moved:
                log.info("test ledger: %d look(s) of %s filed by the model file's sha256 "
                         "(%s) are this model's (%s)", moved, model_sha256[:12], SCHEMA_V1,
                         key[:12])
        return key

    # -- writing ------------------------------------------------------------------------
    def _example_set(self, con: LedgerConnection, hashes: Sequence[bytes]) -> tuple[str, int]:
        distinct = sorted(set(hashes))
        set_id = example_set_id(distinct)
        if con.execute("SELECT 1 FROM example_sets WHERE id = ?", (set_id,)).fetchone() is None:
            con.execute("INSERT INTO example_sets (id, n) VALUES (?, ?)",
                        (set_id, len(distinct)))
            con.executemany("INSERT INTO set_examples (set_id, hash) VALUES (?, ?)",
                            ((set_id, h) for h in distinct))
        return set_id, len(distinct)

    def _lineage(self, con: LedgerConnection, model: str, set_id: str,
                 supersedes: Look | None, new_study: bool
                 ) -> tuple[str | None, dict[str, int], str]:
        """The lineage this look is charged to (merging every lineage it overlaps; the
        model's latest one when it overlaps none, unless a new study), the examples it
        shares with each overlapping look, and why (quantkit.verdict.ledger.JOINED_BY)."""
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
        latest = con.execute("SELECT lineage FROM looks WHERE model_key = ? ORDER BY rowid "
                             "DESC LIMIT 1", (model,)).fetchone()
        lineage, why = charged_lineage(target, latest[0] if latest else None, new_study)
        if supersedes is not None and target is not None and not merged and \
                target == supersedes.lineage and not any(shared.values()):
            why = "supersedes"
        return lineage, shared, why

    def _execution_check(self, con: LedgerConnection, model: str, set_id: str,
                         look_basis: str | None, members: Mapping[str, str] | None
                         ) -> Look | None:
        """The decided look this run checks on another execution: the same basis and test
        examples, every member it tested here with the same artifact (the latest such)."""
        if not look_basis or not members:
            return None
        rows = con.execute("SELECT * FROM looks WHERE model_key = ? AND look_basis = ? AND "
                           "example_set = ? AND state = 'decided' ORDER BY rowid DESC",
                           (model, look_basis, set_id)).fetchall()
        for row in rows:
            look = self._look(con, row)
            tested = look.artifacts()
            if tested and all(members.get(c) == sha for c, sha in tested.items()):
                return look
        return None

    def reserve(self, *, model_key: str, examples: Sequence[bytes], split_sha256: str,
                decision_key: str, alpha_declared: float, supersedes: str | None,
                planner: Callable[[LookAlpha], dict[str, Any] | None], run_dir: str = "",
                facts: dict[str, Any] | None = None,
                model_sha256: str | None = None, model_basis: str = "",
                fingerprint: ModelFingerprint | None = None, new_study: str | None = None,
                look_basis: str | None = None, members: Mapping[str, str] | None = None,
                execution: Mapping[str, Any] | None = None) -> Reservation:
        """Read, adopt, check or reserve the look of ``decision_key`` (class docstring).

        ``planner(alpha)`` declares the family at the look's alpha and plans its power; it
        returns None when no member is to be tested (no look is written), else a dict with
        ``family`` (SignoffFamily.to_dict()), ``plan`` (FamilyPlan.to_dict()), ``metric`` and
        optionally ``value`` (anything the caller needs back, not stored). It runs inside
        the write transaction, so the alpha it plans at is the alpha the look gets.
        ``model_key`` / ``model_basis`` / ``fingerprint``: the model (a fingerprint is
        matched against the models the ledger knows); ``new_study``: verdict.new_study;
        ``look_basis`` and ``members`` (candidate -> artifact sha256): what finds a decided
        look this run is an execution check of; ``execution``: the backend facts stored.
        """
        if not examples:
            raise LedgerError("a look needs the test examples", where="ledger reserve",
                              value=0, fix="sign off on a non-empty test split")
        try:
            return self._reserve(model_key=model_key, model_sha256=model_sha256 or model_key,
                                 examples=examples, split_sha256=split_sha256,
                                 decision_key=decision_key, alpha_declared=alpha_declared,
                                 supersedes=supersedes, planner=planner, run_dir=run_dir,
                                 facts=facts, model_basis=model_basis, fingerprint=fingerprint,
                                 new_study=new_study, look_basis=look_basis, members=members,
                                 execution=dict(execution or {}))
        except _NoLook as none:  # rolled back: no look, no merged lineage
            return none.reservation

    def _reserve(self, *, model_key: str, model_sha256: str, examples: Sequence[bytes],
                 split_sha256: str, decision_key: str, alpha_declared: float,
                 supersedes: str | None, planner: Callable[[LookAlpha], dict[str, Any] | None],
                 run_dir: str, facts: dict[str, Any] | None, model_basis: str,
                 fingerprint: ModelFingerprint | None, new_study: str | None,
                 look_basis: str | None, members: Mapping[str, str] | None,
                 execution: dict[str, Any]) -> Reservation:
        with self._write() as con:
            model_key = self._model(con, model_key, model_basis, fingerprint, model_sha256)
            n_model = con.execute("SELECT COUNT(*) FROM looks WHERE model_key = ?",
                                  (model_key,)).fetchone()[0]
            known = {"model_key": model_key, "model_looks": int(n_model)}
            same = con.execute("SELECT * FROM looks WHERE model_key = ? AND decision_key = ? "
                               "ORDER BY (state = 'decided') DESC, rowid LIMIT 1",
                               (model_key, decision_key)).fetchone()
            if same is not None:
                look = self._look(con, same)
                if look.state == "decided":
                    log.info("test ledger: identical to look %d (%s) of %s: its decision is "
                             "read, nothing is charged", look.number, look.id[:12], look.decided)
                    return Reservation("read", self.path, look.alpha, look, **known)
                planned = planner(look.alpha)
                if planned is not None and planned["family"]["sha256"] == look.family_sha256:
                    log.info("test ledger: completing look %d (%s), reserved by another run "
                             "with the same inputs", look.number, look.id[:12])
                    return Reservation("adopted", self.path, look.alpha, look, planned, **known)
            sup = self._resolve(con, supersedes) if supersedes else None
            if sup is not None and sup.model_key != model_key:
                raise LedgerError("verdict.supersedes names a look of another model",
                                  where=self.where, value=supersedes,
                                  fix=f"name a look of model {model_key[:12]} (`quantkit "
                                      f"ledger {model_key[:12]}`)")
            set_id, n = self._example_set(con, examples)
            checked = self._execution_check(con, model_key, set_id, look_basis, members)
            if checked is not None:
                log.info("test ledger: look %d (%s) tested these artifacts on these test "
                         "examples on another execution: this run is its execution check, "
                         "charged nothing", checked.number, checked.id[:12])
                return Reservation("check", self.path, checked.alpha, checked,
                                   checks=tuple(self._checks(con, checked.id)), **known)
            lineage, shared, joined_by = self._lineage(con, model_key, set_id, sup,
                                                       bool(new_study))
            earlier_rows = con.execute("SELECT * FROM looks WHERE model_key = ? AND "
                                       "lineage = ? ORDER BY rowid",
                                       (model_key, lineage)).fetchall() if lineage else []
            earlier = [self._look(con, r) for r in earlier_rows]
            alpha = dataclasses.replace(
                look_alpha(alpha_declared, [SpentLook(e.alpha.alpha, e.alpha.alpha_declared)
                                            for e in earlier]), joined_by=joined_by)
            earlier_summary = [{**e.summary(), "shared_examples": shared.get(e.id, 0),
                                "overlap": shared.get(e.id, 0) / n} for e in earlier]
            planned = planner(alpha)
            if planned is None:
                raise _NoLook(Reservation("none", self.path, alpha,
                                          earlier=tuple(earlier_summary), **known))
            look_id = secrets.token_hex(32)
            self._insert(con, look_id=look_id, model_key=model_key, model_sha256=model_sha256,
                         alpha=alpha, lineage=lineage or look_id, set_id=set_id, n=n,
                         split_sha256=split_sha256, decision_key=decision_key,
                         planned=planned, sup=sup, run_dir=run_dir,
                         facts={**(facts or {}), "joined_by": joined_by},
                         earlier=earlier_summary, new_study=new_study,
                         look_basis=look_basis, execution=execution)
            look = self._look(con, con.execute("SELECT * FROM looks WHERE id = ?",
                                               (look_id,)).fetchone())
        log.info("test ledger %s: %s", self.where, alpha.describe())
        return Reservation("new", self.path, alpha, look, planned, **known)

    def _insert(self, con: LedgerConnection, *, look_id: str, model_key: str,
                model_sha256: str, alpha: LookAlpha, lineage: str, set_id: str, n: int,
                split_sha256: str, decision_key: str, planned: dict[str, Any],
                sup: Look | None, run_dir: str, facts: dict[str, Any],
                earlier: list[dict[str, Any]], new_study: str | None,
                look_basis: str | None, execution: dict[str, Any]) -> None:
        family = planned["family"]
        others = con.execute("SELECT COUNT(*) FROM looks WHERE model_key = ? AND lineage != ?",
                             (model_key, lineage)).fetchone()[0]
        row = {"id": look_id, "model_key": model_key, "model_sha256": model_sha256,
               "number": alpha.number, "lineage": lineage, "example_set": set_id,
               "n_examples": n, "split_sha256": split_sha256, "decision_key": decision_key,
               "state": "reserved", "alpha": alpha.alpha,
               "alpha_declared": alpha.alpha_declared, "budget": alpha.budget,
               "spent_before": alpha.spent_before, "share": alpha.share, "rule": alpha.rule,
               "family_sha256": family["sha256"], "method": family.get("method", ""),
               "metric": str(planned.get("metric", "")),
               "candidates": json.dumps(list(family.get("candidates", []))),
               "supersedes": sup.id if sup else None, "started": _now(), "decided": None,
               "run_dir": str(run_dir), "host": socket.gethostname(), "pid": os.getpid(),
               "family_json": _dumps(family), "plan_json": _dumps(planned.get("plan") or {}),
               "facts_json": _dumps(facts), "earlier_json": _dumps(earlier),
               "other_data_looks": int(others), "decision_json": None, "identity": IDENTITY,
               "new_study": new_study, "look_basis": look_basis,
               "execution_json": _dumps(execution)}
        con.execute(f"INSERT INTO looks ({', '.join(row)}) VALUES "
                    f"({', '.join('?' * len(row))})", tuple(row.values()))

    def complete(self, look_id: str, *, decision: dict[str, Any],
                 members: Sequence[dict[str, Any]]) -> tuple[Look, bool]:
        """Write the decision of a reserved look. Returns (look, True); if another run
        decided it first, (that look, False): the first decision stands."""
        with self._write() as con:
            row = con.execute("SELECT * FROM looks WHERE id = ?", (look_id,)).fetchone()
            if row is None:
                raise LedgerError("the look to complete is not in the test ledger",
                                  where=self.where, value=look_id,
                                  fix="do not edit or replace the ledger while a run signs off")
            look = self._look(con, row)
            if look.state == "decided":
                return look, False
            con.execute("UPDATE looks SET state = 'decided', decided = ?, decision_json = ? "
                        "WHERE id = ?", (_now(), _dumps(decision), look_id))
            con.executemany(
                f"INSERT INTO look_members (look_id, {', '.join(MEMBER_COLUMNS)}) VALUES "
                f"({', '.join('?' * (1 + len(MEMBER_COLUMNS)))})",
                ((look_id, m["candidate"], int(m["position"]), m.get("artifact_sha256"),
                  m.get("metric"), m["status"], m.get("raw_status"), m.get("point"),
                  m.get("low"), m.get("high"), m.get("p_noninferiority")) for m in members))
            look = self._look(con, con.execute("SELECT * FROM looks WHERE id = ?",
                                               (look_id,)).fetchone())
        return look, True

    def add_check(self, look_id: str, *, execution: Mapping[str, Any],
                  decision: dict[str, Any], statuses: Mapping[str, str],
                  run_dir: str = "") -> ExecutionCheck:
        """Record an execution check of a decided look (charged nothing)."""
        check_id = secrets.token_hex(32)
        with self._write() as con:
            if con.execute("SELECT 1 FROM looks WHERE id = ?", (look_id,)).fetchone() is None:
                raise LedgerError("the look to check is not in the test ledger",
                                  where=self.where, value=look_id,
                                  fix="do not edit or replace the ledger while a run signs off")
            con.execute(f"INSERT INTO look_checks ({', '.join(CHECK_COLUMNS)}) VALUES "
                        f"({', '.join('?' * len(CHECK_COLUMNS))})",
                        (check_id, look_id, _now(), str(run_dir), socket.gethostname(),
                         os.getpid(), _dumps(dict(execution)), _dumps(decision),
                         _dumps(dict(statuses))))
            (check,) = [c for c in self._checks(con, look_id) if c.id == check_id]
        return check
