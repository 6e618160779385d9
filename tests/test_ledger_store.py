"""The persistent test ledger (quantkit/ledger_store.py) on real SQLite files: looks keyed by
model and example content, lineages by overlap, supersedes, reads of identical looks, a
planner that tests nothing writes nothing, concurrent writers, one-line errors."""

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


def _reserve(store, ids, key, *, model=MODEL, supersedes=None, planner=None, alpha=A):
    return store.reserve(model_key=model, examples=_ex(ids), split_sha256="s" + key,
                         decision_key=key, alpha_declared=alpha, supersedes=supersedes,
                         planner=planner or _planner(), run_dir=f"/runs/{key}")


def _decide(store, res, status="INCONCLUSIVE"):
    rows = [{"candidate": c, "position": i + 1, "status": status}
            for i, c in enumerate(res.look.candidates)]
    return store.complete(res.look.id, decision={"rows": rows}, members=rows)


def test_overlapping_test_sets_are_one_lineage_and_each_look_is_charged(tmp_path):
    store = LedgerStore(tmp_path / "l.sqlite")
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


def test_disjoint_data_is_a_new_lineage_unless_it_supersedes(tmp_path):
    store = LedgerStore(tmp_path / "l.sqlite")
    first = _reserve(store, range(0, 100), "k1")
    _decide(store, first)
    fresh = _reserve(store, range(1000, 1100), "k2")
    assert fresh.look.number == 1 and fresh.look.lineage != first.look.lineage
    assert fresh.look.other_data_looks == 1  # listed, not charged
    retest = _reserve(store, range(2000, 2100), "k3", supersedes=first.look.id[:10])
    assert retest.look.number == 2 and retest.look.lineage == first.look.lineage
    assert retest.look.supersedes == first.look.id
    assert retest.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    with pytest.raises(LedgerError, match="another model"):
        _reserve(store, range(5), "k5", model="cd" * 32, supersedes=first.look.id)
    with pytest.raises(LedgerError, match="no look with this id"):
        _reserve(store, range(5), "k6", supersedes="0123456789")


def test_a_look_bridging_two_lineages_merges_them_and_pays_for_both(tmp_path):
    store = LedgerStore(tmp_path / "l.sqlite")
    a = _reserve(store, range(0, 50), "a")
    b = _reserve(store, range(100, 150), "b")
    assert a.look.lineage != b.look.lineage
    bridge = _reserve(store, range(40, 110), "c")  # shares examples with both
    assert bridge.look.number == 3 and bridge.look.lineage == a.look.lineage
    assert bridge.alpha.spent_before == pytest.approx(2 * a.alpha.alpha)
    assert bridge.alpha.exhausted  # 0.9 alpha twice is more than the budget: nothing left
    assert {lk.lineage for lk in store.looks(MODEL)} == {a.look.lineage}


def test_an_identical_run_reads_a_decided_look_and_completes_a_reserved_one(tmp_path):
    store = LedgerStore(tmp_path / "l.sqlite")
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


def test_a_planner_that_tests_nothing_writes_no_look(tmp_path):
    store = LedgerStore(tmp_path / "l.sqlite")
    none = _reserve(store, range(100), "k", planner=_planner(test=False))
    assert none.kind == "none" and none.look is None and none.alpha.number == 1
    assert store.looks(MODEL) == []
    assert _reserve(store, range(100), "k2").look.number == 1


def _writer(path: str, key: str, ids: list[int], out) -> None:
    store = LedgerStore(path)
    res = _reserve(store, ids, key, planner=_planner(sleep_s=0.5))
    look, _ = _decide(store, res, "PASS")
    out.put((key, look.number, look.alpha.alpha))


@pytest.mark.parametrize("jobs", [2, 4])
def test_concurrent_writers_lose_no_look(tmp_path, jobs):
    """Jobs of a sweep sharing one ledger, started together on overlapping test data (one
    lineage): one look each, numbered 1..jobs, each charged, alphas within the budget."""
    path = str(tmp_path / "l.sqlite")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, f"job{i}", list(range(i, 100 + i)), out))
             for i in range(jobs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    got = sorted(out.get(timeout=5) for _ in procs)
    assert sorted(n for _, n, _ in got) == list(range(1, jobs + 1))
    assert sum(a for _, _, a in got) <= A
    looks = LedgerStore(path).looks(MODEL)
    assert sorted(lk.number for lk in looks) == list(range(1, jobs + 1))
    assert all(lk.state == "decided" for lk in looks)
    assert len({lk.lineage for lk in looks}) == 1
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


def test_example_hashes_are_of_the_input_content():
    from quantkit.data.splits import ImageSplit, TextSplit

    t1 = TextSplit("test", ["a b", "c d"], [0, 1])
    t2 = TextSplit("test", ["c d", "a b", "e"], [1, 1, 0])  # relabelled, reordered, grown
    h1, h2 = example_hashes(t1), example_hashes(t2)
    assert len(h1) == 2 and set(h1) < set(h2)
    img = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    i1 = example_hashes(ImageSplit("test", img, [0, 1]))
    i2 = example_hashes(ImageSplit("test", img[::-1].copy(), None))
    assert set(i1) == set(i2) and i1[0] != i1[1]


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
