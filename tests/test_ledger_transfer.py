"""Moving looks between test ledgers (quantkit/ledger_transfer.py, ``quantkit ledger export`` /
``import``): round trips SQLite <-> PostgreSQL keep every look, its id, alpha, decision and
checks; importing twice, or into the source, adds nothing; a look whose id is here with other
content is one error and imports nothing; looks reserved in two ledgers are charged together
once moved into one; the file is written atomically."""

from __future__ import annotations

import json

import pytest

from quantkit.cli.ledger_cmd import main as ledger_main
from quantkit.errors import LedgerError
from quantkit.ledger_store import LedgerStore
from quantkit.ledger_transfer import _records, export_looks, import_looks
from quantkit.verdict.ledger import SPENDING_RATIO

from test_ledger_store import MODEL, A, _decide, _fingerprint, _reserve

LOOK1 = A * (1 - SPENDING_RATIO)


@pytest.fixture
def new_ledger(tmp_path, request):
    """new_ledger(kind) -> the target of a new, empty ledger of that backend."""
    count = iter(range(1000))

    def make(kind: str) -> str:
        if kind == "sqlite":
            return str(tmp_path / f"ledger{next(count)}.sqlite")
        return request.getfixturevalue("postgres_server").new_database()
    return make


def _content(store: LedgerStore) -> list[dict]:
    """Everything an export holds, in order."""
    with store.transaction() as con:
        return list(_records(con))


def _populate(store: LedgerStore) -> dict:
    """Decided and reserved looks, two lineages (a new study), a supersedes, an execution
    check and a fingerprinted model."""
    shas = {"fp16": "a" * 64, "int8": "b" * 64}
    first = _reserve(store, range(100), "k1", look_basis="basis", members=shas)
    _decide(store, first, "PASS", shas=shas)
    store.add_check(first.look.id, execution={"backend": {"name": "trt"}},
                    decision={"rows": []}, statuses={"fp16": "PASS", "int8": "FAIL"})
    second = _reserve(store, range(50, 150), "k2")  # reserved, never decided
    study = _reserve(store, range(1000, 1100), "k3", new_study="data of 2026-12")
    _decide(store, study, "FAIL")
    retest = _reserve(store, range(2000, 2050), "k4", supersedes=first.look.id)
    fp = _fingerprint("w1", (1.0, 0.25))
    other = _reserve(store, range(100), "k5", model=fp.key(), fingerprint=fp)
    return {"first": first, "second": second, "study": study, "retest": retest,
            "other": other}


@pytest.mark.parametrize("source_kind,dest_kind", [
    ("sqlite", "postgresql"), ("postgresql", "sqlite"), ("sqlite", "sqlite"),
    ("postgresql", "postgresql")])
def test_a_round_trip_keeps_every_look_and_importing_again_adds_nothing(
        new_ledger, tmp_path, source_kind, dest_kind):
    source = LedgerStore(new_ledger(source_kind))
    made = _populate(source)
    out = tmp_path / "looks.jsonl"
    counts = export_looks(source, out)
    assert counts == {"model": 2, "example_set": 4, "look": 5, "check": 1}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp
    dest = LedgerStore(new_ledger(dest_kind))
    res = import_looks(dest, out)
    assert (res.looks_added, res.checks_added, res.models_added, res.sets_added) == (5, 1, 2, 4)
    assert _content(dest) == _content(source)  # ids, alphas, lineages, decisions, checks
    looks = {lk.id: lk for lk in dest.looks()}
    first = looks[made["first"].look.id]
    assert first.alpha.alpha == made["first"].alpha.alpha == pytest.approx(LOOK1)
    assert first.statuses() == {"fp16": "PASS", "int8": "PASS"}
    assert first.n_checks == 1 and dest.checks(first.id)[0].statuses["int8"] == "FAIL"
    assert looks[made["second"].look.id].state == "reserved"
    assert looks[made["study"].look.id].new_study == "data of 2026-12"
    # again, and into the ledger it came from: nothing added, nothing changed
    for store in (dest, source):
        before = _content(store)
        again = import_looks(store, out)
        assert (again.looks_added, again.looks_present, again.checks_added,
                again.models_added, again.sets_added, again.lineages_merged) == (0, 5, 0, 0, 0, 0)
        assert _content(store) == before
    # the next look is charged as in the source: look 4 of the first lineage (k1, k2, k4)
    nxt = _reserve(dest, range(10, 60), "k6")
    assert nxt.look.number == 4 and nxt.look.lineage == made["first"].look.lineage
    assert nxt.alpha.spent_before == pytest.approx(
        sum(lk.alpha.alpha for lk in dest.looks(MODEL) if lk.lineage == nxt.look.lineage
            and lk.id != nxt.look.id))


def test_a_look_here_with_other_content_is_one_error_and_imports_nothing(tmp_path):
    source = LedgerStore(tmp_path / "a.sqlite")
    first = _reserve(source, range(100), "k1")
    export_looks(source, tmp_path / "one.jsonl")
    dest = LedgerStore(tmp_path / "b.sqlite")
    import_looks(dest, tmp_path / "one.jsonl")
    _reserve(source, range(3000, 3100), "k2")  # a look dest does not hold yet
    export_looks(source, tmp_path / "two.jsonl")
    recs = [json.loads(ln) for ln in (tmp_path / "two.jsonl").read_text().splitlines()]
    for rec in recs:
        if rec.get("kind") == "look" and rec["row"]["id"] == first.look.id:
            rec["row"]["alpha"] = 0.02  # the same id, another alpha
    (tmp_path / "bad.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    before = _content(dest)
    with pytest.raises(LedgerError, match=f"look {first.look.id[:12]} is in this ledger with "
                                          r"other content \(alpha\)") as err:
        import_looks(dest, tmp_path / "bad.jsonl")
    assert "\n" not in str(err.value) and "nothing was imported" in str(err.value)
    assert _content(dest) == before  # k2's look was not added either
    assert import_looks(dest, tmp_path / "two.jsonl").looks_added == 1
    (tmp_path / "junk.jsonl").write_text("not json\n")
    with pytest.raises(LedgerError, match="not a quantkit ledger export"):
        import_looks(dest, tmp_path / "junk.jsonl")
    recs[0]["schema"] = "quantkit-test-ledger/9"
    (tmp_path / "future.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    with pytest.raises(LedgerError, match="another test ledger schema"):
        import_looks(dest, tmp_path / "future.jsonl")


def test_a_look_reserved_here_and_decided_there_takes_that_decision(new_ledger, tmp_path):
    ci = LedgerStore(new_ledger("postgresql"))
    res = _reserve(ci, range(100), "k1")
    export_looks(ci, tmp_path / "reserved.jsonl")  # a CI artifact while the run was going
    laptop = LedgerStore(new_ledger("sqlite"))
    import_looks(laptop, tmp_path / "reserved.jsonl")
    assert laptop.looks()[0].state == "reserved"
    _decide(ci, res, "PASS")
    export_looks(ci, tmp_path / "decided.jsonl")
    done = import_looks(laptop, tmp_path / "decided.jsonl")
    assert (done.looks_added, done.looks_decided) == (0, 1)
    (look,) = laptop.looks()
    assert look.state == "decided" and look.statuses() == {"fp16": "PASS", "int8": "PASS"}
    assert _content(laptop) == _content(ci)
    # an earlier export (reserved) changes nothing now
    assert import_looks(laptop, tmp_path / "reserved.jsonl").looks_decided == 0
    assert laptop.looks()[0].state == "decided"


def test_looks_of_two_ledgers_are_charged_together_once_in_one(new_ledger, tmp_path):
    """Two hosts looked at one model apart (each a look 1): moved into one ledger, looks on
    shared examples, and looks on fresh data without a new study, join one lineage; its
    next look has what is left of the budget (nothing: 2 x 0.9 alpha was spent)."""
    here = LedgerStore(new_ledger("sqlite"))
    mine = _reserve(here, range(0, 100), "mine")
    _decide(here, mine, "PASS")
    there = LedgerStore(new_ledger("postgresql"))
    theirs = _reserve(there, range(50, 150), "theirs")  # shares 50 examples with mine
    _reserve(there, range(5000, 5100), "fresh", model="cd" * 32)  # another model
    export_looks(there, tmp_path / "there.jsonl")
    res = import_looks(here, tmp_path / "there.jsonl")
    assert res.looks_added == 2 and len(res.overspent) == 1
    assert "spent 0.045 of a budget of 0.025" in res.overspent[0]
    looks = {lk.id: lk for lk in here.looks()}
    assert looks[theirs.look.id].lineage == mine.look.lineage
    assert looks[theirs.look.id].number == 1
    assert looks[theirs.look.id].alpha.alpha == pytest.approx(LOOK1)
    nxt = _reserve(here, range(20, 40), "next")  # overlaps only mine: charged for both
    assert nxt.look.number == 3 and nxt.alpha.exhausted
    # fresh data of the model, no new study: charged to the model's lineage; a new study not
    elsewhere = LedgerStore(new_ledger("sqlite"))
    _reserve(elsewhere, range(7000, 7100), "fresh-data")
    _reserve(elsewhere, range(8000, 8100), "study", new_study="2027 data")
    export_looks(elsewhere, tmp_path / "elsewhere.jsonl")
    import_looks(here, tmp_path / "elsewhere.jsonl")
    lineages = {lk.decision_key: lk.lineage for lk in here.looks(MODEL)}
    assert lineages["fresh-data"] == mine.look.lineage
    assert lineages["study"] != mine.look.lineage


def test_a_model_known_here_by_fingerprint_keeps_this_ledgers_key(tmp_path):
    here = LedgerStore(tmp_path / "a.sqlite")
    a = _fingerprint("w1", (1.0, 0.10049999, -0.5))
    first = _reserve(here, range(100), "a", model=a.key(), fingerprint=a)
    there = LedgerStore(tmp_path / "b.sqlite")
    b = _fingerprint("w1", (1.0, 0.10050001, -0.5))  # a re-export's float noise
    assert a.key() != b.key()
    theirs = _reserve(there, range(200, 300), "b", model=b.key(), fingerprint=b)
    export_looks(there, tmp_path / "b.jsonl")
    res = import_looks(here, tmp_path / "b.jsonl")
    assert res.models_matched == {b.key(): a.key()} and res.models_added == 0
    (look,) = [lk for lk in here.looks() if lk.id == theirs.look.id]
    assert look.model_key == a.key() and look.lineage == first.look.lineage  # model rule
    assert import_looks(here, tmp_path / "b.jsonl").looks_added == 0


def test_the_cli_exports_and_imports_with_db_as_verdict_ledger(tmp_path, capsys,
                                                               postgres_url):
    source = tmp_path / "a.sqlite"
    store = LedgerStore(source)
    _decide(store, _reserve(store, range(100), "k1"), "PASS")
    out = tmp_path / "ci" / "looks.jsonl"
    assert ledger_main(["export", str(out), "--db", str(source)]) == 0
    assert "exported 1 look(s)" in capsys.readouterr().out
    url = postgres_url.replace("quantkit@", "quantkit:s3cret-pw@")  # trust auth ignores it
    assert ledger_main(["import", str(out), "--db", url]) == 0
    printed = capsys.readouterr().out
    assert "1 look(s) added" in printed and "s3cret-pw" not in printed
    assert "quantkit:***@" in printed
    assert ledger_main(["import", str(out), "--db", url]) == 0
    assert "0 look(s) added" in capsys.readouterr().out
    assert ledger_main(["--db", url]) == 0
    listing = capsys.readouterr().out
    assert "s3cret-pw" not in listing and "PASS" in listing
    assert ledger_main(["export", str(tmp_path / "x.jsonl"), "--db",
                        str(tmp_path / "none.sqlite")]) == 2
    assert "no test ledger here" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "none.sqlite").exists()
    assert ledger_main(["import", str(tmp_path / "missing.jsonl"), "--db", str(source)]) == 2
    assert "cannot read it" in capsys.readouterr().err
