"""The rows of the persistent test ledger as values: a look, an execution check of one, and
what a reservation found or made (quantkit/ledger_store.py writes them, the tables are
quantkit/ledger_schema.py). Reading only; plain SQL and JSON text, the same on both backends
(quantkit/ledger_dialect.py)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantkit.ledger_dialect import LedgerConnection
from quantkit.ledger_schema import SCHEMA_V1
from quantkit.verdict.ledger import LookAlpha

__all__ = ["CHECK_COLUMNS", "ExecutionCheck", "Look", "MEMBER_COLUMNS", "Reservation",
           "checks_of", "look_of"]

#: a look member's columns after ``look_id`` (ledger_schema.py: look_members)
MEMBER_COLUMNS = ("candidate", "position", "artifact_sha256", "metric", "status",
                  "raw_status", "point", "low", "high", "p_noninferiority")
#: an execution check's columns (ledger_schema.py: look_checks)
CHECK_COLUMNS = ("id", "look_id", "started", "run_dir", "host", "pid", "execution_json",
                 "decision_json", "statuses_json")


def _loads(text: str | None, default: Any) -> Any:
    return default if text is None else json.loads(text)


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
    identity: str = SCHEMA_V1  # how the look names model and examples (ledger_schema)
    new_study: str | None = None  # verdict.new_study of the run that made it
    execution: dict[str, Any] = field(default_factory=dict)  # backend, Q/DQ mode, host facts
    n_checks: int = 0  # execution checks of this look (another backend), charged nothing

    def statuses(self) -> dict[str, str]:
        return {m["candidate"]: m["status"] for m in self.members}

    def artifacts(self) -> dict[str, str]:
        """Tested member -> the sha256 of its artifact."""
        return {m["candidate"]: m["artifact_sha256"] for m in self.members}

    def summary(self) -> dict[str, Any]:
        """The short form other looks' records list this look by."""
        return {"id": self.id, "look": self.number, "started": self.started,
                "state": self.state, "alpha_one_sided": self.alpha.alpha,
                "alpha_declared": self.alpha.alpha_declared, "n_examples": self.n_examples,
                "candidates": list(self.candidates), "method": self.method,
                "metric": self.metric, "statuses": self.statuses(),
                "supersedes": self.supersedes, "run_dir": self.run_dir}


@dataclass(frozen=True)
class ExecutionCheck:
    """Another execution of a decided look's artifacts on its test data (a row of
    ``look_checks``): charged nothing (quantkit/verdict/ledger.py, "Look")."""

    id: str
    look_id: str
    started: str
    run_dir: str
    host: str
    execution: dict[str, Any]
    decision: dict[str, Any]
    statuses: dict[str, str]


@dataclass(frozen=True)
class Reservation:
    """What :meth:`LedgerStore.reserve` found or made.

    ``kind``: ``new`` (a new look, charged), ``adopted`` (an identical look reserved by
    another run and not yet decided: this run completes it), ``read`` (an identical look
    already decided: its decision stands, nothing is charged), ``check`` (a decided look of
    the same basis and artifacts, another execution: ``look`` is that look; this run is its
    execution check, charged nothing), ``none`` (the planner tested no member: no look;
    ``look`` is None and ``alpha`` is what it would have had). ``model_key``: the key the
    model's looks are filed under (a fingerprint matched to a known model gets that model's
    key); ``model_looks``: the looks of this model the ledger held before this run (0: the
    ledger has never seen it).
    """

    kind: str
    path: Path | str  # the ledger: its file, or its database URL with the password masked
    alpha: LookAlpha
    look: Look | None = None
    planned: Any = None  # what the planner returned (new / adopted)
    earlier: tuple[dict[str, Any], ...] = ()  # kind none: the lineage's looks it would join
    model_key: str = ""
    model_looks: int = 0
    checks: tuple[ExecutionCheck, ...] = ()  # kind check: the look's earlier checks



def look_of(con: LedgerConnection, row: tuple) -> Look:
    """A ``looks`` row (with its members) as a Look."""
    cols = [d[0] for d in con.execute("SELECT * FROM looks LIMIT 0").description]
    r = dict(zip(cols, row))
    members = tuple(
        dict(zip(MEMBER_COLUMNS, m))
        for m in con.execute(f"SELECT {', '.join(MEMBER_COLUMNS)} FROM look_members "
                             "WHERE look_id = ? ORDER BY position", (r["id"],)))
    alpha = LookAlpha(number=r["number"], alpha=r["alpha"], alpha_declared=r["alpha_declared"],
                      budget=r["budget"], spent_before=r["spent_before"], share=r["share"],
                      rule=r["rule"])
    facts = json.loads(r["facts_json"])
    if facts.get("joined_by"):
        alpha = dataclasses.replace(alpha, joined_by=str(facts["joined_by"]))
    return Look(id=r["id"], model_key=r["model_key"], model_sha256=r["model_sha256"],
                number=r["number"],
                lineage=r["lineage"], example_set=r["example_set"],
                n_examples=r["n_examples"], split_sha256=r["split_sha256"],
                decision_key=r["decision_key"], state=r["state"], alpha=alpha,
                family_sha256=r["family_sha256"], method=r["method"], metric=r["metric"],
                candidates=tuple(json.loads(r["candidates"])), supersedes=r["supersedes"],
                started=r["started"], decided=r["decided"], run_dir=r["run_dir"],
                host=r["host"], pid=r["pid"], family=json.loads(r["family_json"]),
                plan=json.loads(r["plan_json"]), facts=facts,
                earlier=tuple(json.loads(r["earlier_json"])),
                other_data_looks=r["other_data_looks"],
                decision=_loads(r["decision_json"], None), members=members,
                identity=r["identity"], new_study=r["new_study"],
                execution=_loads(r["execution_json"], {}),
                n_checks=con.execute("SELECT COUNT(*) FROM look_checks WHERE look_id = ?",
                                     (r["id"],)).fetchone()[0])


def checks_of(con: LedgerConnection, look_id: str) -> list[ExecutionCheck]:
    """The execution checks of a look, oldest first."""
    return [ExecutionCheck(id=r[0], look_id=r[1], started=r[2], run_dir=r[3], host=r[4],
                           execution=json.loads(r[5]), decision=json.loads(r[6]),
                           statuses=json.loads(r[7]))
            for r in con.execute("SELECT id, look_id, started, run_dir, host, "
                                 "execution_json, decision_json, statuses_json FROM "
                                 "look_checks WHERE look_id = ? ORDER BY rowid",
                                 (look_id,)).fetchall()]
