"""Moving looks between test ledgers: ``quantkit ledger export FILE`` writes every look of a
ledger (a SQLite file or a PostgreSQL team ledger) to a JSON-lines file; ``quantkit ledger
import FILE`` adds to a ledger the looks it does not hold yet (another host's, a CI job's
artifact), without counting any look twice.

The file, one JSON object a line, in the source's insertion order::

    {"format": "quantkit-ledger-export/1", "schema": <ledger schema>, "source": <the ledger,
     its password masked>, "exported": <UTC time>, "counts": {...}}
    {"kind": "model", "row": {a models row}}
    {"kind": "example_set", "id": ..., "n": ..., "hashes": [<hex>, ...]}   (each set a look uses)
    {"kind": "look", "row": {a looks row}, "members": [{a look_members row}, ...]}
    {"kind": "check", "row": {a look_checks row}}

read in one transaction and written atomically (quantkit/fsutil.py: a temp file, renamed).

An import runs in one write transaction (all or nothing):

* a look keeps its id, number and alpha. A look the ledger holds already adds nothing; every
  column fixed when it was reserved must be equal (else one LedgerError naming the look and
  the columns, and nothing is imported). Its decision may move on: a look reserved here and
  decided in the file takes that decision; two decisions must be the same.
* a model keeps its key; a key the ledger does not know whose fingerprint matches a model it
  knows is filed under that model's key, as a reservation would file it.
* a lineage of looks new to the ledger joins its lineages as
  :func:`quantkit.verdict.ledger.imported_lineages` says; lineages the file links (one
  lineage there, two here) are merged here. Lineages whose looks spent more than their budget
  in the ledgers they came from are reported: their next look has no alpha left.
* an example set must match its id (the sha256 of its sorted example ids).

So importing the same file twice, or a file into the ledger it came from, adds nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from quantkit.errors import LedgerError
from quantkit.fsutil import atomic_path
from quantkit.ledger_dialect import LedgerConnection
from quantkit.ledger_rows import CHECK_COLUMNS, MEMBER_COLUMNS
from quantkit.ledger_schema import SCHEMA
from quantkit.ledger_store import LedgerStore, example_set_id, known_model
from quantkit.models.fingerprint import ModelFingerprint
from quantkit.verdict.ledger import imported_lineages

__all__ = ["FORMAT", "ImportResult", "export_looks", "import_looks"]

log = logging.getLogger(__name__)

FORMAT = "quantkit-ledger-export/1"
#: the looks columns that change after the look is reserved: its lineage (merged by a later
#: look), its model key (a first-layout look filed under the model's key), its decision;
#: ``rowid``: the insertion order of one ledger (PostgreSQL's explicit column)
_MOVING = ("rowid", "lineage", "model_key", "state", "decided", "decision_json")
_KINDS = ("model", "example_set", "look", "check")


def _rows(con: LedgerConnection, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [{c: v for c, v in zip(cols, row) if c != "rowid"} for row in cur.fetchall()]


def _members(con: LedgerConnection, look_id: str) -> list[dict[str, Any]]:
    return _rows(con, f"SELECT {', '.join(MEMBER_COLUMNS)} FROM look_members WHERE "
                      "look_id = ? ORDER BY position", (look_id,))


def _records(con: LedgerConnection) -> Iterator[dict[str, Any]]:
    for row in _rows(con, "SELECT * FROM models ORDER BY rowid"):
        yield {"kind": "model", "row": row}
    for set_id, n in con.execute(
            "SELECT s.id, s.n FROM example_sets s JOIN (SELECT example_set, MIN(rowid) AS first "
            "FROM looks GROUP BY example_set) u ON u.example_set = s.id ORDER BY u.first"
            ).fetchall():
        hashes = sorted(bytes(r[0]) for r in con.execute(
            "SELECT hash FROM set_examples WHERE set_id = ?", (set_id,)).fetchall())
        yield {"kind": "example_set", "id": set_id, "n": n, "hashes": [h.hex() for h in hashes]}
    for row in _rows(con, "SELECT * FROM looks ORDER BY rowid"):
        yield {"kind": "look", "row": row, "members": _members(con, row["id"])}
    for row in _rows(con, "SELECT * FROM look_checks ORDER BY rowid"):
        yield {"kind": "check", "row": row}


def export_looks(store: LedgerStore, path: str | os.PathLike) -> dict[str, int]:
    """Write every look of ``store`` (with its models, example sets and execution checks) to
    ``path`` (module docstring); returns how many of each kind."""
    with store.transaction() as con:  # one consistent ledger
        records = list(_records(con))
    counts = {k: sum(r["kind"] == k for r in records) for k in _KINDS}
    header = {"format": FORMAT, "schema": SCHEMA, "source": store.where,
              "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "counts": counts}
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in (header, *records):
            f.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
    log.info("test ledger %s: %d look(s) exported to %s", store.where, counts["look"], path)
    return counts


@dataclass
class _Export:
    path: str
    header: dict[str, Any]
    models: list[dict[str, Any]] = field(default_factory=list)
    sets: list[dict[str, Any]] = field(default_factory=list)
    looks: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)


def _bad_file(path: str, what: str, value: Any = None) -> LedgerError:
    return LedgerError(f"not a quantkit ledger export: {what}", where=path, value=value,
                       fix="pass a file written by `quantkit ledger export FILE`")


def _read(path: str | os.PathLike) -> _Export:
    where = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad_file(where, f"cannot read it ({exc})") from exc
    try:
        recs = [json.loads(line) for line in lines if line.strip()]
    except json.JSONDecodeError as exc:
        raise _bad_file(where, f"line {exc.doc[:40]!r} is not JSON") from exc
    if not recs or not isinstance(recs[0], dict) or recs[0].get("format") != FORMAT:
        raise _bad_file(where, f"its first line does not say format {FORMAT}",
                        recs[0].get("format") if recs and isinstance(recs[0], dict) else None)
    if recs[0].get("schema") != SCHEMA:
        raise LedgerError("the export is of another test ledger schema", where=where,
                          value=recs[0].get("schema"),
                          fix=f"import it with the quantkit that exported it ({SCHEMA} here)")
    out = _Export(where, recs[0])
    lists = {"model": out.models, "example_set": out.sets, "look": out.looks,
             "check": out.checks}
    for i, rec in enumerate(recs[1:], start=2):
        if not isinstance(rec, dict) or rec.get("kind") not in lists:
            raise _bad_file(where, f"line {i} is no model, example set, look or check",
                            rec.get("kind") if isinstance(rec, dict) else None)
        lists[rec["kind"]].append(rec)
    for s in out.sets:
        hashes = [bytes.fromhex(h) for h in s["hashes"]]
        if example_set_id(hashes) != s["id"] or len(set(hashes)) != s["n"]:
            raise _bad_file(where, "an example set does not match its id (edited?)", s["id"])
    return out


@dataclass(frozen=True)
class ImportResult:
    """What an import added and found (counts), and its warnings."""

    source: str
    looks_added: int = 0
    looks_decided: int = 0  # reserved here, decided in the file: that decision taken
    looks_present: int = 0
    checks_added: int = 0
    models_added: int = 0
    sets_added: int = 0
    lineages_merged: int = 0
    models_matched: dict[str, str] = field(default_factory=dict)  # file key -> key here
    overspent: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        out = [f"{self.looks_added} look(s) added, {self.looks_decided} reserved look(s) "
               f"decided, {self.looks_present} already here; {self.checks_added} execution "
               f"check(s), {self.models_added} model(s), {self.sets_added} example set(s) "
               f"added; {self.lineages_merged} lineage(s) merged (from {self.source})"]
        out += [f"model {a[:12]} of the file is model {b[:12]} here (its fingerprint matches)"
                for a, b in self.models_matched.items()]
        return out + list(self.overspent)


def _differs(here: dict[str, Any], there: dict[str, Any], columns) -> list[str]:
    return [c for c in columns if here.get(c) != there.get(c)]


class _Importer:
    """One import inside one write transaction (module docstring)."""

    def __init__(self, con: LedgerConnection, data: _Export, where: str) -> None:
        self.con, self.data, self.where = con, data, where
        self.n: dict[str, int] = dict.fromkeys(
            ("looks_added", "looks_decided", "looks_present", "checks_added", "models_added",
             "sets_added", "lineages_merged"), 0)
        self.key_map: dict[str, str] = {}
        self.touched: set[tuple[str, str]] = set()  # (model, lineage) that got looks
        self.renamed: dict[str, str] = {}  # a lineage merged here -> the one it joined

    def error(self, what: str, value: Any, fix: str) -> LedgerError:
        return LedgerError(what, where=f"{self.where} (importing {self.data.path})",
                           value=value, fix=fix)

    def run(self) -> ImportResult:
        columns = [d[0] for d in self.con.execute("SELECT * FROM looks LIMIT 0").description
                   if d[0] != "rowid"]
        for m in self.data.models:
            self.model(m["row"])
        for s in self.data.sets:
            self.example_set(s)
        present: dict[str, str] = {}  # look id -> its lineage here
        for look in self.data.looks:
            row = look["row"]
            if sorted(row) != sorted(columns):
                raise _bad_file(self.data.path, "its looks have other columns than this "
                                "ledger's", sorted(set(row) ^ set(columns)))
            lineage = self.present(row, look["members"], columns)
            if lineage is not None:
                present[row["id"]] = lineage
        groups: dict[str, list[dict[str, Any]]] = {}
        for look in self.data.looks:
            groups.setdefault(look["row"]["lineage"], []).append(look)
        # where each lineage of the file is charged here, judged against the ledger as it
        # was (the file's lineages are already apart by the same rules), then its new looks
        # in the file's order: the order of reservations, which "latest" reads
        target = {lin: self.lineage(lin, looks, present) for lin, looks in groups.items()}
        for look in self.data.looks:
            if look["row"]["id"] not in present:
                self.insert(look, self.resolve(target[look["row"]["lineage"]]), columns)
        for c in self.data.checks:
            self.check(c["row"])
        matched = {a: b for a, b in self.key_map.items() if a != b}
        return ImportResult(source=str(self.data.header.get("source", "")), **self.n,
                            models_matched=matched, overspent=tuple(self.overspent()))

    def model(self, row: dict[str, Any]) -> None:
        key = row["key"]
        if self.con.execute("SELECT 1 FROM models WHERE key = ?", (key,)).fetchone():
            self.key_map[key] = key
            return
        fp = row.get("fingerprint_json")
        known = known_model(self.con, ModelFingerprint.from_dict(json.loads(fp))) if fp else None
        if known is not None:
            self.key_map[key] = known
            return
        self.con.execute("INSERT INTO models (key, basis, weights_sha256, fingerprint_json, "
                         "first_seen) VALUES (?, ?, ?, ?, ?)",
                         (key, row["basis"], row["weights_sha256"], fp, row["first_seen"]))
        self.key_map[key] = key
        self.n["models_added"] += 1

    def example_set(self, s: dict[str, Any]) -> None:
        if self.con.execute("SELECT 1 FROM example_sets WHERE id = ?", (s["id"],)).fetchone():
            return
        self.con.execute("INSERT INTO example_sets (id, n) VALUES (?, ?)", (s["id"], s["n"]))
        self.con.executemany("INSERT INTO set_examples (set_id, hash) VALUES (?, ?)",
                             ((s["id"], bytes.fromhex(h)) for h in s["hashes"]))
        self.n["sets_added"] += 1

    def present(self, row: dict[str, Any], members: list[dict[str, Any]],
                columns: list[str]) -> str | None:
        """The lineage here of a look the ledger holds already (None: a new look); its
        decision taken where it is still reserved here."""
        rows = _rows(self.con, "SELECT * FROM looks WHERE id = ?", (row["id"],))
        if not rows:
            return None
        here = rows[0]
        self.n["looks_present"] += 1
        diff = _differs(here, row, [c for c in columns if c not in _MOVING])
        if diff:
            raise self.error(f"look {row['id'][:12]} is in this ledger with other content "
                             f"({', '.join(diff)})", row["id"],
                             "import a file exported from a ledger this one shares its looks "
                             "with; nothing was imported")
        if row["state"] == "decided" and here["state"] == "reserved":
            self.con.execute("UPDATE looks SET state = 'decided', decided = ?, "
                             "decision_json = ? WHERE id = ?",
                             (row["decided"], row["decision_json"], row["id"]))
            self.insert_members(row["id"], members)
            self.n["looks_decided"] += 1
        elif row["state"] == "decided" and (
                here["decision_json"] != row["decision_json"]
                or _members(self.con, row["id"]) != [
                    {c: m.get(c) for c in MEMBER_COLUMNS} for m in members]):
            raise self.error(f"look {row['id'][:12]} is decided differently in this ledger",
                             row["id"], "keep the first decision: do not import this file "
                                        "(nothing was imported)")
        return here["lineage"]

    def insert_members(self, look_id: str, members: list[dict[str, Any]]) -> None:
        self.con.executemany(
            f"INSERT INTO look_members (look_id, {', '.join(MEMBER_COLUMNS)}) VALUES "
            f"({', '.join('?' * (1 + len(MEMBER_COLUMNS)))})",
            ((look_id, *(m.get(c) for c in MEMBER_COLUMNS)) for m in members))

    def resolve(self, lineage: str) -> str:
        """A lineage here after the merges this import made."""
        while lineage in self.renamed:
            lineage = self.renamed[lineage]
        return lineage

    def lineage(self, lineage: str, looks: list[dict[str, Any]],
                present: dict[str, str]) -> str:
        """The lineage here that the file's lineage ``lineage`` is charged to (merging the
        lineages here it joins: :func:`quantkit.verdict.ledger.imported_lineages`)."""
        new = [lk for lk in looks if lk["row"]["id"] not in present]
        known = {self.resolve(present[lk["row"]["id"]]) for lk in looks
                 if lk["row"]["id"] in present}
        model = self.key_map.get(looks[0]["row"]["model_key"], looks[0]["row"]["model_key"])
        joined = known
        if new:
            sets = sorted({lk["row"]["example_set"] for lk in new})
            overlapping = {r[0] for r in self.con.execute(
                "SELECT DISTINCT l.lineage FROM set_examples a JOIN set_examples b ON "
                "b.hash = a.hash JOIN looks l ON l.example_set = b.set_id WHERE "
                f"a.set_id IN ({', '.join('?' * len(sets))}) AND l.model_key = ?",
                (*sets, model)).fetchall()}
            latest = self.con.execute("SELECT lineage FROM looks WHERE model_key = ? ORDER BY "
                                      "rowid DESC LIMIT 1", (model,)).fetchone()
            opened_by = json.loads(looks[0]["row"]["facts_json"]).get("joined_by")
            joined = imported_lineages(known, overlapping, latest[0] if latest else None,
                                       new_study=opened_by == "new_study")
        if not joined:
            return lineage
        first = {r[0]: r[1] for r in self.con.execute(
            "SELECT lineage, MIN(rowid) FROM looks WHERE model_key = ? GROUP BY lineage",
            (model,)).fetchall()}
        target = min(joined, key=lambda lin: (first.get(lin, float("inf")), lin))
        for other in sorted(joined - {target}):
            self.con.execute("UPDATE looks SET lineage = ? WHERE model_key = ? AND "
                             "lineage = ?", (target, model, other))
            self.renamed[other] = target
            self.n["lineages_merged"] += 1
            self.touched.add((model, target))
        return target

    def insert(self, look: dict[str, Any], lineage: str, columns: list[str]) -> None:
        row = {**look["row"], "lineage": lineage,
               "model_key": self.key_map.get(look["row"]["model_key"], look["row"]["model_key"])}
        self.con.execute(f"INSERT INTO looks ({', '.join(columns)}) VALUES "
                         f"({', '.join('?' * len(columns))})", tuple(row[c] for c in columns))
        self.insert_members(row["id"], look["members"] if row["state"] == "decided" else [])
        self.n["looks_added"] += 1
        self.touched.add((row["model_key"], lineage))

    def check(self, row: dict[str, Any]) -> None:
        rows = _rows(self.con, "SELECT * FROM look_checks WHERE id = ?", (row["id"],))
        if rows:
            if _differs(rows[0], row, CHECK_COLUMNS):
                raise self.error(f"execution check {row['id'][:12]} is in this ledger with "
                                 "other content", row["id"], "nothing was imported")
            return
        self.con.execute(f"INSERT INTO look_checks ({', '.join(CHECK_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(CHECK_COLUMNS))})",
                         tuple(row[c] for c in CHECK_COLUMNS))
        self.n["checks_added"] += 1

    def overspent(self) -> Iterator[str]:
        """A line for each lineage the import added to whose looks spent more than its
        budget (alpha spent apart in two ledgers: a later look of it gets none)."""
        for model, lineage in sorted(self.touched):
            rows = self.con.execute("SELECT alpha, alpha_declared FROM looks WHERE "
                                    "model_key = ? AND lineage = ?",
                                    (model, lineage)).fetchall()
            spent, budget = sum(r[0] for r in rows), min(r[1] for r in rows)
            if spent > budget * (1 + 1e-9):
                yield (f"lineage {lineage[:12]} of model {model[:12]}: its {len(rows)} looks "
                       f"spent {spent:.4g} of a budget of {budget:g} in the ledgers they were "
                       "reserved in (alpha spent apart); its next look has no alpha left")


def import_looks(store: LedgerStore, path: str | os.PathLike) -> ImportResult:
    """Add the looks of the export at ``path`` to ``store`` (module docstring)."""
    data = _read(path)
    with store.transaction() as con:
        result = _Importer(con, data, store.where).run()
    for line in result.overspent:
        log.warning("test ledger %s: %s", store.where, line)
    log.info("test ledger %s: import of %s: %s", store.where, path, result.lines()[0])
    return result
