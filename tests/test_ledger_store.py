"""The persistent test ledger (quantkit/ledger_store.py) on real SQLite files and, with the same
tests (``ledger_target``: tests/conftest.py), on a real PostgreSQL server the tests start:
looks keyed by model and example content, lineages by overlap, every look of a model charged
unless a new study is declared, supersedes, reads of identical looks, execution checks
charged nothing, models matched by fingerprint, a planner that tests nothing writes nothing,
concurrent writers. SQLite only: a first-layout file upgraded with its looks, WAL, one-line
errors for missing, corrupt and foreign files."""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
import time

import numpy as np
import pytest

from quantkit.errors import LedgerError
from quantkit.ledger_store import LedgerStore, example_hashes
from quantkit.verdict.ledger import SPENDING_RATIO

MODEL = "ab" * 32
A = 0.025


def _ex(ids) -> list[bytes]:
    return [hashlib.sha256(f"example {i}".encode()).digest() for i in ids]


def _planner(candidates=("fp16", "int8"), sleep_s: float = 0.0, test: bool = True):
    def plan(alpha):
        time.sleep(sleep_s)
        if not test:
            return None
        fam = {"candidates": list(candidates), "method": "fixed_sequence",
               "alpha_one_sided": alpha.alpha}
        fam["sha256"] = hashlib.sha256(repr(sorted(fam.items())).encode()).hexdigest()
        return {"family": fam, "plan": {"rows": []}, "metric": "accuracy"}
    return plan


def _reserve(store, ids, key, *, model=MODEL, supersedes=None, planner=None, alpha=A,
             **extra):
    return store.reserve(model_key=model, examples=_ex(ids), split_sha256="s" + key,
                         decision_key=key, alpha_declared=alpha, supersedes=supersedes,
                         planner=planner or _planner(), run_dir=f"/runs/{key}", **extra)


def _decide(store, res, status="INCONCLUSIVE", shas=None):
    rows = [{"candidate": c, "position": i + 1, "status": status,
             "artifact_sha256": (shas or {}).get(c)}
            for i, c in enumerate(res.look.candidates)]
    return store.complete(res.look.id, decision={"rows": rows}, members=rows)


def test_overlapping_test_sets_are_one_lineage_and_each_look_is_charged(ledger_target):
    store = LedgerStore(ledger_target)
    first = _reserve(store, range(0, 100), "k1")
    assert first.kind == "new" and first.look.number == 1
    assert first.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO))
    _decide(store, first)
    # a new seed re-draws test from the same pool: 20 examples in common
    second = _reserve(store, range(80, 180), "k2")
    assert second.kind == "new" and second.look.number == 2
    assert second.look.lineage == first.look.lineage
    assert second.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    (e,) = second.look.earlier
    assert e["id"] == first.look.id and e["shared_examples"] == 20 and e["overlap"] == 0.2
    assert e["statuses"] == {"fp16": "INCONCLUSIVE", "int8": "INCONCLUSIVE"}
    # a grown split that contains the first: look 3 (transitively the same lineage)
    third = _reserve(store, range(0, 300), "k3")
    assert third.look.number == 3 and third.look.lineage == first.look.lineage
    assert third.alpha.spent_before == pytest.approx(first.alpha.alpha + second.alpha.alpha)
    # another model's looks never count
    other = _reserve(store, range(0, 100), "k4", model="cd" * 32)
    assert other.look.number == 1 and other.alpha.alpha == first.alpha.alpha
    looks = store.looks(MODEL[:8])
    assert [lk.number for lk in looks] == [1, 2, 3] and looks[0].state == "decided"
    assert [lk.state for lk in looks[1:]] == ["reserved", "reserved"]  # still charged


def test_disjoint_data_is_charged_to_the_model_unless_a_new_study_is_declared(ledger_target):
    """H2 of issue 49: a re-test on fresh, non-overlapping data is another look of the model
    (charged), unless the run declares a new study (a fresh budget, recorded)."""
    store = LedgerStore(ledger_target)
    first = _reserve(store, range(0, 100), "k1")
    assert first.model_looks == 0 and first.alpha.joined_by == "first"
    _decide(store, first)
    fresh = _reserve(store, range(1000, 1100), "k2")
    assert fresh.look.number == 2 and fresh.look.lineage == first.look.lineage
    assert fresh.alpha.joined_by == "model" and fresh.model_looks == 1
    assert fresh.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    assert "every look of a model counts" in fresh.alpha.describe()
    study = _reserve(store, range(2000, 2100), "k3", new_study="data of 2026-12")
    assert study.look.number == 1 and study.look.lineage != first.look.lineage
    assert study.alpha.joined_by == "new_study" and study.look.new_study == "data of 2026-12"
    assert study.look.other_data_looks == 2  # listed, not charged
    # the model's latest lineage is now the new study's: fresh data joins it
    later = _reserve(store, range(3000, 3100), "k4")
    assert later.look.lineage == study.look.lineage and later.look.number == 2
    # a new study on examples an earlier look saw is charged with that look
    seen = _reserve(store, range(0, 50), "k5", new_study="claims to be new")
    assert seen.alpha.joined_by == "overlap" and seen.look.lineage == first.look.lineage
    assert seen.look.number == 3


def test_a_re_test_names_the_look_it_supersedes(ledger_target):
    store = LedgerStore(ledger_target)
    first = _reserve(store, range(0, 100), "k1")
    _decide(store, first)
    other = _reserve(store, range(500, 600), "k2", new_study="another study")
    retest = _reserve(store, range(2000, 2100), "k3", supersedes=first.look.id[:10])
    assert retest.look.number == 2 and retest.look.lineage == first.look.lineage
    assert retest.look.supersedes == first.look.id and retest.alpha.joined_by == "supersedes"
    assert other.look.lineage != first.look.lineage
    assert retest.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    with pytest.raises(LedgerError, match="another model"):
        _reserve(store, range(5), "k5", model="cd" * 32, supersedes=first.look.id)
    with pytest.raises(LedgerError, match="no look with this id"):
        _reserve(store, range(5), "k6", supersedes="0123456789")


def test_an_execution_check_of_a_decided_look_is_charged_nothing(ledger_target):
    """backend=trt after ONNX Runtime: the same look basis (model file, test split, verdict
    settings) and the artifacts the look tested, another execution: that look's check."""
    store = LedgerStore(ledger_target)
    shas = {"fp16": "a" * 64, "int8": "b" * 64}
    first = _reserve(store, range(100), "ort", look_basis="basis", members=shas,
                     execution={"backend": {"name": "ort"}, "qdq_mode": "exact"})
    _decide(store, first, "PASS", shas=shas)
    check = _reserve(store, range(100), "trt", look_basis="basis", members=shas,
                     execution={"backend": {"name": "trt"}})
    assert check.kind == "check" and check.look.id == first.look.id
    assert check.alpha.alpha == first.alpha.alpha and check.checks == ()
    store.add_check(first.look.id, execution={"backend": {"name": "trt"}},
                    decision={"rows": []}, statuses={"fp16": "PASS", "int8": "FAIL"})
    again = _reserve(store, range(100), "trt2", look_basis="basis", members=shas)
    assert again.kind == "check" and len(again.checks) == 1
    assert again.checks[0].statuses == {"fp16": "PASS", "int8": "FAIL"}
    assert len(store.looks(MODEL)) == 1  # nothing charged
    # another artifact, or another basis (a margin, another test split): a new look
    other = _reserve(store, range(100), "new-int8", look_basis="basis",
                     members={**shas, "int8": "c" * 64})
    assert other.kind == "new" and other.look.number == 2
    assert _reserve(store, range(100), "margin", look_basis="other",
                    members=shas).look.number == 3
    assert first.look.execution == {"backend": {"name": "ort"}, "qdq_mode": "exact"}


def _fingerprint(weights: str, probe: tuple[float, ...]):
    from quantkit.models.fingerprint import ModelFingerprint

    return ModelFingerprint(weights_sha256=weights, n_weights=3, probe=(probe,))


def test_a_fingerprint_that_matches_a_known_model_gets_its_key(ledger_target):
    """A re-export: equal weights digest, probe outputs within float noise (here across a
    rounding boundary of the key) -> the looks are filed under the model's first key."""
    store = LedgerStore(ledger_target)
    a = _fingerprint("w1", (1.0, 0.10049999, -0.5))
    b = _fingerprint("w1", (1.0, 0.10050001, -0.5))  # float noise of a re-export
    assert a.key() != b.key() and a.matches(b)
    first = _reserve(store, range(100), "a", model=a.key(), fingerprint=a)
    again = _reserve(store, range(100), "b", model=b.key(), fingerprint=b)
    assert again.model_key == first.model_key == a.key() and again.look.number == 2
    other = _fingerprint("w2", (1.0, 0.1005, -0.5))  # other weights: another model
    assert _reserve(store, range(100), "c", model=other.key(),
                    fingerprint=other).look.number == 1
    moved = _fingerprint("w1", (1.0, 0.2, -0.5))  # same weights, another function
    assert not a.matches(moved)
    assert _reserve(store, range(100), "d", model=moved.key(),
                    fingerprint=moved).look.number == 1


def test_a_first_layout_ledger_is_upgraded_and_its_looks_still_count(tmp_path):
    """A quantkit-test-ledger/1 file (looks keyed by the ONNX file's sha256): opened, it is
    upgraded in place; a run of that very file (its sha256) files the old looks under the
    model's new key and is charged with them."""
    from quantkit.ledger_dialect import SqliteDialect
    from quantkit.ledger_schema import SCHEMA, SCHEMA_V1, tables_v1

    path = tmp_path / "v1.sqlite"
    file_sha = "f" * 64
    with sqlite3.connect(path) as con:
        con.executescript(tables_v1(SqliteDialect(path)))
        con.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_V1,))
    store = LedgerStore(path)
    store.check()  # opened: upgraded in place
    with sqlite3.connect(path) as con:
        meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta["schema"] == SCHEMA and meta["upgraded_from"].startswith(SCHEMA_V1)
    old = _reserve(store, range(100), "old", model=file_sha)  # a look as /1 filed it:
    with sqlite3.connect(path) as con:  # by the file's sha256, identity /1
        con.execute("UPDATE looks SET identity = ?", (SCHEMA_V1,))
    fp = _fingerprint("w", (1.0, 0.5))
    new = store.reserve(model_key=fp.key(), model_sha256=file_sha, fingerprint=fp,
                        examples=_ex(range(50, 150)), split_sha256="s", decision_key="new",
                        alpha_declared=A, supersedes=None, planner=_planner())
    assert new.model_key == fp.key() and new.model_looks == 1
    assert new.look.number == 2 and new.look.lineage == old.look.lineage
    assert [lk.model_key for lk in store.looks()] == [fp.key(), fp.key()]


def test_a_look_bridging_two_lineages_merges_them_and_pays_for_both(ledger_target):
    store = LedgerStore(ledger_target)
    a = _reserve(store, range(0, 50), "a")
    b = _reserve(store, range(100, 150), "b", new_study="a second study")
    assert a.look.lineage != b.look.lineage
    bridge = _reserve(store, range(40, 110), "c")  # shares examples with both
    assert bridge.look.number == 3 and bridge.look.lineage == a.look.lineage
    assert bridge.alpha.spent_before == pytest.approx(2 * a.alpha.alpha)
    assert bridge.alpha.exhausted  # 0.9 alpha twice is more than the budget: nothing left
    assert {lk.lineage for lk in store.looks(MODEL)} == {a.look.lineage}


def test_an_identical_run_reads_a_decided_look_and_completes_a_reserved_one(ledger_target):
    store = LedgerStore(ledger_target)
    first = _reserve(store, range(100), "same")
    adopted = _reserve(store, range(100), "same")  # reserved, not decided: completed, not new
    assert adopted.kind == "adopted" and adopted.look.id == first.look.id
    look, won = _decide(store, first, "PASS")
    assert won and look.state == "decided" and look.statuses()["fp16"] == "PASS"
    again, won2 = _decide(store, adopted, "FAIL")  # the first decision stands
    assert not won2 and again.statuses()["fp16"] == "PASS"
    read = _reserve(store, range(100), "same")
    assert read.kind == "read" and read.look.id == first.look.id
    assert len(store.looks(MODEL)) == 1  # nothing charged


def test_a_planner_that_tests_nothing_writes_no_look(ledger_target):
    store = LedgerStore(ledger_target)
    none = _reserve(store, range(100), "k", planner=_planner(test=False))
    assert none.kind == "none" and none.look is None and none.alpha.number == 1
    assert store.looks(MODEL) == []
    assert _reserve(store, range(100), "k2").look.number == 1


def _writer(target: str, key: str, ids: list[int], sleep_s: float, out) -> None:
    store = LedgerStore(target)
    res = _reserve(store, ids, key, planner=_planner(sleep_s=sleep_s))
    look, _ = _decide(store, res, "PASS")
    out.put((key, look.number, look.alpha.alpha))


def concurrent_looks(target: str, jobs: int, sleep_s: float = 0.5) -> list[tuple[str, int, float]]:
    """``jobs`` processes started together, each reserving and deciding one look on
    overlapping test data of one model: (job key, look number, alpha) of each, sorted."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer,
                         args=(target, f"job{i}", list(range(i, 100 + i)), sleep_s, out))
             for i in range(jobs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    return sorted(out.get(timeout=5) for _ in procs)


@pytest.mark.parametrize("jobs", [2, 4])
def test_concurrent_writers_lose_no_look(ledger_target, jobs):
    """Jobs of a sweep sharing one ledger, started together on overlapping test data (one
    lineage): one look each, numbered 1..jobs, each charged at look k's alpha."""
    path = ledger_target
    got = concurrent_looks(path, jobs)
    assert sorted((n, a) for _, n, a in got) == [
        (k, pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO ** (k - 1)))
        for k in range(1, jobs + 1)]
    assert sum(a for _, _, a in got) <= A
    looks = LedgerStore(path).looks(MODEL)
    assert sorted(lk.number for lk in looks) == list(range(1, jobs + 1))
    assert [lk.number for lk in looks] == list(range(1, jobs + 1))  # in reservation order
    assert all(lk.state == "decided" for lk in looks)
    assert len({lk.lineage for lk in looks}) == 1
    if "://" not in path:
        with sqlite3.connect(path) as con:
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_missing_corrupt_and_foreign_files_are_one_line_errors(tmp_path):
    with pytest.raises(LedgerError, match="no test ledger here"):
        LedgerStore(tmp_path / "none.sqlite", create=False).looks()
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(LedgerError, match="corrupt") as err:
        LedgerStore(bad).looks()
    assert "\n" not in str(err.value)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    with pytest.raises(LedgerError, match="not a quantkit test ledger"):
        LedgerStore(other).looks()
    with pytest.raises(LedgerError, match="not a file"):
        LedgerStore(tmp_path).looks()
    with pytest.raises(LedgerError, match="corrupt") as err:
        LedgerStore(bad).check()  # the run's preflight
    assert str(bad) in str(err.value) and "Fix:" in str(err.value)


def test_example_hashes_are_of_the_source_content():
    from quantkit.data.splits import ImageSplit, TextSplit

    t1 = TextSplit("test", ["a b", "c d"], [0, 1])
    t2 = TextSplit("test", ["c d", "a b", "e"], [1, 1, 0])  # relabelled, reordered, grown
    h1, h2 = example_hashes(t1), example_hashes(t2)
    assert len(h1) == 2 and set(h1) < set(h2)
    # whitespace and Unicode form are not content: a trailing space, a run of spaces, a
    # non-breaking space, a decomposed accent
    t3 = TextSplit("test", ["a b ", "  c\u00a0\t d"], [0, 1])
    assert example_hashes(t3) == h1
    assert example_hashes(TextSplit("t", ["cafe\u0301"], [0])) == \
        example_hashes(TextSplit("t", ["caf\u00e9"], [0]))
    img = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    i1 = example_hashes(ImageSplit("test", img, [0, 1]))
    i2 = example_hashes(ImageSplit("test", img[::-1].copy(), None))
    assert set(i1) == set(i2) and i1[0] != i1[1]
    # images whose source ids were taken before a resize: those ids, whatever the pixels
    ids = [b"x" * 32, b"y" * 32]
    small = ImageSplit("test", img, [0, 1], source_ids=ids)
    big = ImageSplit("test", np.zeros((2, 8, 8), np.uint8), [0, 1], source_ids=ids)
    assert example_hashes(small) == example_hashes(big) == ids
    assert example_hashes(big.subset([1])) == [ids[1]]


def test_a_detectors_examples_are_its_image_files_bytes(tmp_path):
    from quantkit.data.identity import image_file_id
    from quantkit.tasks.detection.dataset import DetectionSplit
    from quantkit.tasks.detection.labels import labels_from_arrays

    files = []
    for i, data in enumerate((b"\x89PNG first", b"\x89PNG second")):
        files.append(tmp_path / f"{i}.png")
        files[-1].write_bytes(data)
    free = DetectionSplit("test", files, [4, 4], [4, 4])
    ids = example_hashes(free)
    assert ids == [image_file_id(b"\x89PNG first"), image_file_id(b"\x89PNG second")]
    assert ids[0] != ids[1] and example_hashes(free.subset([1])) == ids[1:]
    boxes = labels_from_arrays([f.name for f in files], [4, 4], [4, 4],
                               [np.array([[0, 0, 2, 2]], np.float32), np.zeros((0, 4), np.float32)],
                               [np.array([0]), np.zeros(0, np.int64)], ["a"])
    assert example_hashes(DetectionSplit("test", files, [4, 4], [4, 4], boxes)) == ids  # boxes are labels
    files[0].write_bytes(b"\x89PNG first, edited")
    assert example_hashes(free)[0] != ids[0]  # another file is another example


def test_a_new_ledger_opened_while_another_run_holds_its_write_lock_waits(tmp_path):
    """Turning a new file into WAL upgrades a read lock to a write lock, which SQLite
    refuses at once ("database is locked", no busy handler) while another connection
    writes: two sweep jobs creating one ledger together. The store waits instead."""
    import threading
    import time

    path = tmp_path / "l.sqlite"
    held = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")  # the write lock on the new, still rollback-mode file
        held.set()
        time.sleep(0.5)
        con.execute("COMMIT")
        con.close()

    other = threading.Thread(target=hold)
    other.start()
    held.wait(10)
    t0 = time.monotonic()
    res = _reserve(LedgerStore(path, timeout_s=30), range(100), "k")
    other.join()
    assert res.kind == "new" and res.look.number == 1
    assert time.monotonic() - t0 >= 0.3  # it waited for the lock, it did not go around it
    with pytest.raises(LedgerError, match="stayed locked by another run for 0.2 s"):
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        try:
            _reserve(LedgerStore(path, timeout_s=0.2), range(100), "k2")
        finally:
            con.execute("ROLLBACK")
            con.close()
