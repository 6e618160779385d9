"""``quantkit ledger [MODEL | RUN_DIR | record.json] [--db LEDGER]``: the looks at the test split;
``quantkit ledger export FILE [--db LEDGER]`` / ``quantkit ledger import FILE [--db LEDGER]``:
move looks between ledgers (quantkit/ledger_transfer.py).

Lists the looks the persistent test ledger (quantkit/ledger_store.py; default
``$XDG_DATA_HOME/quantkit/ledger.sqlite``: quantkit/ledger_location.py) holds for a model:
given a prefix of the FP32 model's sha256 (``record.model.sha256``) or of its ledger key
(``record.signoff.ledger.model_key``: a zoo model's looks across seeds, a user model's
across re-exports), or a run dir / its record.json (whose ``signoff.ledger`` is read), or
nothing (every model). One line per look: id, look number in its data lineage, when,
examples, the one-sided alpha it was tested at (of the declared), the family in test order
with each member's status, whether it superseded an earlier look or opened a new study,
and how many execution checks (another backend, charged nothing) it has.
``--db`` names the ledger as ``verdict.ledger`` does: a SQLite file or a
``postgresql://user@host:port/db`` team ledger (shown with its password masked; a URL copied
from a record, whose password reads ``***``, takes it from PGPASSWORD or ~/.pgpass).
Export writes every look of the ledger to a JSON-lines file, atomically; import adds the
looks the ledger does not hold yet (creating the ledger where missing), so importing a file
twice, or into the ledger it came from, adds nothing.
Errors (no ledger, a corrupt file, an unknown model, a look whose id is here with other
content) are one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from quantkit.errors import LedgerError, QuantkitError
from quantkit.ledger_location import default_ledger
from quantkit.ledger_store import LedgerStore
from quantkit.ledger_transfer import export_looks, import_looks
from quantkit.record.migrate import load_record

__all__ = ["format_looks", "main", "transfer_main"]

_DB_HELP = ("the ledger: a SQLite file or a postgresql://user@host:port/db URL (default: "
            "$XDG_DATA_HOME/quantkit/ledger.sqlite)")


def _from_record(path: Path) -> tuple[str, str | None]:
    """(model sha256, ledger path or None) from a run dir or its record.json."""
    rec_path = path / "record.json" if path.is_dir() else path
    try:
        rec = load_record(rec_path)
    except (OSError, ValueError) as exc:
        raise LedgerError("cannot read the run's record", where=str(rec_path),
                          value=type(exc).__name__,
                          fix="pass a run dir that holds record.json, or a model sha256 prefix"
                          ) from exc
    facts = rec.signed.ledger if rec.signed is not None else None
    sha = (facts.model_key if facts is not None else None) or \
        (rec.model.sha256 if rec.model is not None else None)
    if not sha:
        raise LedgerError("the record names no model sha256", where=str(rec_path),
                          fix="pass the model's sha256 prefix instead")
    return sha, facts.path if facts is not None else None


def format_looks(looks) -> list[str]:
    """The listing: one header, then one line per look (oldest first)."""
    lines = []
    by_model: dict[str, list] = {}
    for look in looks:
        by_model.setdefault(look.model_key, []).append(look)
    for model, items in by_model.items():
        lineages = {}
        for look in items:
            lineages.setdefault(look.lineage, len(lineages) + 1)
        files = sorted({lk.model_sha256[:12] for lk in items if lk.model_sha256 != model})
        lines.append(f"model {model[:12]}: {len(items)} look(s) on {len(lineages)} test data "
                     f"lineage(s)" + (f" (FP32 model files {', '.join(files)})"
                                      if files else ""))
        lines.append(f"  {'look id':<12}  {'data':<4} {'look':>4}  {'started (UTC)':<25} "
                     f"{'n':>6}  {'alpha (declared)':<18} family: status")
        for look in items:
            st = look.statuses()
            fam = " -> ".join(f"{c} {st.get(c, 'undecided')}" for c in look.candidates)
            if look.state != "decided":
                fam += "  [reserved, never decided: the run stopped; still charged]"
            sup = f"  supersedes {look.supersedes[:12]}" if look.supersedes else ""
            sup += f"  new study: {look.new_study}" if look.new_study else ""
            sup += f"  + {look.n_checks} execution check(s)" if look.n_checks else ""
            alpha = f"{look.alpha.alpha:.4g} ({look.alpha.alpha_declared:g})"
            lines.append(f"  {look.id[:12]:<12}  #{lineages[look.lineage]:<3} "
                         f"{look.number:>4}  {look.started:<25} {look.n_examples:>6}  "
                         f"{alpha:<18} {look.method} {look.metric}: {fam}{sup}")
    return lines


def transfer_main(argv: list[str]) -> int:
    """``quantkit ledger export|import FILE [--db LEDGER]``."""
    ap = argparse.ArgumentParser(prog=f"quantkit ledger {argv[0]}", description=(
        "Write every look of the test ledger to FILE (JSON lines)" if argv[0] == "export" else
        "Add the looks of FILE (from `quantkit ledger export`) that the test ledger does not "
        "hold yet"))
    ap.add_argument("file", help="the JSON-lines export")
    ap.add_argument("--db", default=None, help=_DB_HELP)
    a = ap.parse_args(argv[1:])
    try:
        db = a.db or default_ledger()
        if argv[0] == "export":
            store = LedgerStore(db, create=False)
            counts = export_looks(store, a.file)
            print(f"exported {counts['look']} look(s), {counts['check']} execution check(s), "
                  f"{counts['model']} model(s), {counts['example_set']} example set(s) of "
                  f"test ledger {store.where} to {a.file}")
        else:
            store = LedgerStore(db)
            result = import_looks(store, a.file)
            print(f"test ledger {store.where}: imported {a.file}")
            for line in result.lines():
                print(f"  {line}")
    except QuantkitError as exc:
        sys.stderr.write(f"quantkit ledger {argv[0]}: error: {exc}\n")
        return exc.exit_code
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["export"], ["import"]):
        return transfer_main(argv)
    ap = argparse.ArgumentParser(prog="quantkit ledger", description=(
        "List the looks at the test split that the persistent test ledger holds for a model. "
        "`quantkit ledger export FILE` / `quantkit ledger import FILE` move looks between "
        "ledgers."))
    ap.add_argument("model", nargs="?", default=None,
                    help="model sha256 prefix, a run dir, or a record.json (default: all)")
    ap.add_argument("--db", default=None, help=_DB_HELP.replace("(default: ", "(default: "
                                                                "the record's, else "))
    ap.add_argument("--json", action="store_true", help="print the looks as JSON")
    a = ap.parse_args(argv)
    try:
        prefix, db = a.model, a.db
        if prefix is not None and (Path(prefix).exists() or prefix.endswith(".json")):
            prefix, recorded = _from_record(Path(prefix))
            db = db or recorded
        if prefix is not None and (len(prefix) < 4 or
                                   not all(ch in "0123456789abcdef" for ch in prefix.lower())):
            raise LedgerError("not a model sha256 prefix, run dir or record.json",
                              value=prefix, fix="pass at least 4 hex characters of "
                                                "record.model.sha256, or a run dir")
        store = LedgerStore(db if db else default_ledger(), create=False)
        looks = store.looks(prefix)
        if prefix is not None and not looks:
            raise LedgerError("the test ledger holds no look of this model", where=store.where,
                              value=prefix, fix="check the prefix (`quantkit ledger` lists "
                                                "every model) or the ledger (--db)")
        if a.json:
            print(json.dumps([{**lk.summary(), "model_key": lk.model_key,
                               "model_sha256": lk.model_sha256,
                               "lineage": lk.lineage, "decision": lk.decision,
                               "new_study": lk.new_study, "execution_checks": lk.n_checks}
                              for lk in looks], indent=1, default=str))
        else:
            print(f"test ledger {store.where}")
            for line in format_looks(looks):
                print(line)
    except QuantkitError as exc:
        sys.stderr.write(f"quantkit ledger: error: {exc}\n")
        return exc.exit_code
    return 0
