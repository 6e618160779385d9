"""The persistent test ledger's tables, and the one upgrade from the first layout.

One definition for both backends (a SQLite file, a PostgreSQL team ledger): the DDL below
with the few types that differ as placeholders (``{blob}``, ``{real}``, ``{rowid}``,
``{without_rowid}``), filled in by the connection's dialect (quantkit/ledger_dialect.py),
and statements both accept (``ON CONFLICT``). The store (quantkit/ledger_store.py) runs
these statements and nothing else creates or changes a table. PostgreSQL's ordered tables
(looks, models, look_checks) carry an explicit insertion-order column ``rowid``; SQLite's is
implicit. A PostgreSQL ledger is created at /2 (it never had a /1).

Layout (``meta.schema`` = :data:`SCHEMA`)::

    meta(key, value)                   schema, created, upgraded_from (a /1 file upgraded)
    models(key, basis, weights_sha256, fingerprint_json, first_seen)
                                       each model the ledger knows and what identifies it
    example_sets(id, n)                id = sha256 of the sorted distinct example ids
    set_examples(set_id, hash)         one row per distinct example of a set
    looks(id, model_key, model_sha256, number, lineage, example_set, ..., state, alpha, ...,
          identity, new_study, look_basis, execution_json)
    look_members(look_id, candidate, ...)   each tested member's verdict in that look
    look_checks(id, look_id, ...)      another execution of a decided look's artifacts on
                                       its test data (backend=trt after ORT): not charged

Versions:

* ``quantkit-test-ledger/1``: looks keyed by the model file's sha256 (a prepared zoo / hub
  model by its source) and by the sha256 of each example as the run held it (texts as
  read, images after ``data.image.size``).
* ``quantkit-test-ledger/2`` (current): models by fingerprint or ``model.id``
  (quantkit/models/fingerprint.py), examples by source content
  (quantkit/data/identity.py), every look of a model charged unless a new study is
  declared, execution checks. :func:`upgrade_v1` adds the new tables and columns in place;
  the /1 looks keep their ids (``identity`` = /1), which equal /2's for texts that need no
  normalization and images read at source size, and a run of a model file whose sha256 a
  /1 look names files that look under the model's /2 key.
"""

from __future__ import annotations

from datetime import datetime, timezone

from quantkit.ledger_dialect import Dialect, LedgerConnection

__all__ = ["IDENTITY", "SCHEMA", "SCHEMA_V1", "create", "tables_v1", "upgrade_v1"]

SCHEMA = "quantkit-test-ledger/2"
SCHEMA_V1 = "quantkit-test-ledger/1"
#: how a /2 look identifies its model and examples (``looks.identity``)
IDENTITY = "model fingerprint or model.id; examples by source content"

#: the /1 tables (every ``{`` of the DDL is a dialect placeholder)
_V1_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS example_sets (id TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS set_examples (
    set_id TEXT NOT NULL REFERENCES example_sets(id), hash {blob} NOT NULL,
    PRIMARY KEY (set_id, hash)){without_rowid};
CREATE INDEX IF NOT EXISTS set_examples_hash ON set_examples(hash, set_id);
CREATE TABLE IF NOT EXISTS looks (
    {rowid}id TEXT PRIMARY KEY, model_key TEXT NOT NULL, model_sha256 TEXT NOT NULL,
    number INTEGER NOT NULL,
    lineage TEXT NOT NULL, example_set TEXT NOT NULL REFERENCES example_sets(id),
    n_examples INTEGER NOT NULL, split_sha256 TEXT NOT NULL, decision_key TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'decided')),
    alpha {real} NOT NULL, alpha_declared {real} NOT NULL, budget {real} NOT NULL,
    spent_before {real} NOT NULL, share {real} NOT NULL, rule TEXT NOT NULL,
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
    raw_status TEXT, point {real}, low {real}, high {real}, p_noninferiority {real},
    PRIMARY KEY (look_id, candidate));
"""

#: what /2 adds to /1 (also run, after the /1 tables, on a new file)
_V2_COLUMNS = (
    f"ALTER TABLE looks ADD COLUMN identity TEXT NOT NULL DEFAULT '{SCHEMA_V1}'",
    "ALTER TABLE looks ADD COLUMN new_study TEXT",
    "ALTER TABLE looks ADD COLUMN look_basis TEXT",
    "ALTER TABLE looks ADD COLUMN execution_json TEXT",
)
_V2_TABLES = """
CREATE TABLE IF NOT EXISTS models (
    {rowid}key TEXT PRIMARY KEY, basis TEXT NOT NULL, weights_sha256 TEXT,
    fingerprint_json TEXT, first_seen TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS models_weights ON models(weights_sha256);
CREATE INDEX IF NOT EXISTS looks_basis ON looks(model_key, look_basis);
CREATE TABLE IF NOT EXISTS look_checks (
    {rowid}id TEXT PRIMARY KEY, look_id TEXT NOT NULL REFERENCES looks(id),
    started TEXT NOT NULL,
    run_dir TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    execution_json TEXT NOT NULL, decision_json TEXT NOT NULL, statuses_json TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS look_checks_look ON look_checks(look_id);
"""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _statements(script: str, dialect: Dialect) -> list[str]:
    return [s.format(**dialect.types) for s in script.split(";") if s.strip()]


def tables_v1(dialect: Dialect) -> str:
    """The /1 tables as one script in ``dialect`` (tests make a first-layout file with it)."""
    return ";".join(_statements(_V1_TABLES, dialect)) + ";"


def _set_meta(con: LedgerConnection, key: str, value: str, *, replace: bool = False) -> None:
    con.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO " +
                ("UPDATE SET value = excluded.value" if replace else "NOTHING"), (key, value))


def create(con: LedgerConnection) -> None:
    """Make an empty file or database a /2 ledger (inside the caller's write transaction)."""
    d = con.dialect
    for statement in (_statements(_V1_TABLES, d) + list(_V2_COLUMNS) +
                      _statements(_V2_TABLES, d)):
        con.execute(statement)
    _set_meta(con, "schema", SCHEMA)
    _set_meta(con, "created", _now())


def upgrade_v1(con: LedgerConnection) -> None:
    """A /1 ledger in place as /2 (inside the caller's write transaction): its looks kept,
    marked ``identity`` = /1 (module docstring)."""
    for statement in list(_V2_COLUMNS) + _statements(_V2_TABLES, con.dialect):
        con.execute(statement)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (SCHEMA,))
    _set_meta(con, "upgraded_from", f"{SCHEMA_V1} at {_now()}", replace=True)
