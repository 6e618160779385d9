"""The team ledger on PostgreSQL keeps exactly the SQLite ledger's rules (quantkit/ledger_dialect.py:
one store, the backends' differences in one dialect), tested against a real server the tests
start (tests/pg_server.py): the same sequence of looks gives the same numbers and alphas on
both; concurrent runs get distinct looks and the split alphas on both; a run killed inside
its reservation leaves nothing and one killed after it leaves its look charged, on both; the
write lock's wait and timeout; a URL's password never shown; one clear error for a missing
driver, an unreachable server, a database that is not a ledger, an unsupported URL."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import quantkit
from quantkit.cli.ledger_cmd import format_looks
from quantkit.errors import ConfigError, LedgerError
from quantkit.ledger_dialect import PG_LOCK_KEY, mask_secrets, mask_url
from quantkit.ledger_location import ledger_location
from quantkit.ledger_store import LedgerStore
from quantkit.run.identity import recorded_config
from quantkit.run.stages.preflight import check_ledger
from quantkit.verdict.ledger import SPENDING_RATIO

from test_ledger_store import MODEL, A, _decide, _fingerprint, _planner, _reserve, concurrent_looks

SECRET = "s3cret-pw"


def _script(store: LedgerStore) -> list[tuple]:
    """One sequence of reservations and decisions touching every rule; returns what each
    step got, with lineages numbered in order of appearance (ids are random)."""
    shas = {"fp16": "a" * 64, "int8": "b" * 64}
    steps = []
    fp = _fingerprint("w1", (1.0, 0.5))

    def rec(res) -> None:
        steps.append((res.kind, res.alpha.number, res.alpha.alpha, res.alpha.spent_before,
                      res.alpha.budget, res.alpha.joined_by, res.model_looks,
                      res.look.lineage if res.look else None))

    first = _reserve(store, range(100), "k1", look_basis="b", members=shas)
    rec(first)
    _decide(store, first, "PASS", shas=shas)
    rec(_reserve(store, range(100), "trt", look_basis="b", members=shas))  # a check
    rec(_reserve(store, range(80, 180), "k2"))  # overlap
    rec(_reserve(store, range(1000, 1100), "k3"))  # fresh data: the model's lineage
    study = _reserve(store, range(2000, 2100), "k4", new_study="2026 data")
    rec(study)
    rec(_reserve(store, range(3000, 3050), "k5", supersedes=first.look.id))
    rec(_reserve(store, range(2050, 2150), "k6", alpha=0.01))  # a smaller declared alpha
    rec(_reserve(store, range(90, 2010), "k7"))  # bridges the two lineages
    rec(_reserve(store, range(80, 180), "k2"))  # identical: adopted
    rec(_reserve(store, range(5), "none", planner=_planner(test=False)))
    rec(_reserve(store, range(100), "fp", model=fp.key(), fingerprint=fp))
    names: dict[str, int] = {}
    return [s[:-1] + (names.setdefault(s[-1], len(names)) if s[-1] else None,) for s in steps]


def test_the_same_looks_and_alphas_on_sqlite_and_postgresql(tmp_path, postgres_url):
    sqlite = _script(LedgerStore(tmp_path / "l.sqlite"))
    postgres = _script(LedgerStore(postgres_url))
    assert postgres == sqlite  # exactly: numbers, alphas, budgets, lineages, kinds
    assert [s[0] for s in sqlite] == ["new", "check", "new", "new", "new", "new", "new", "new",
                                      "adopted", "none", "new"]

    def kept(target) -> list[tuple]:  # every look as the ledger keeps it, ids left out
        looks = LedgerStore(target).looks()
        lineages = {lk.lineage: i for i, lk in enumerate(looks)}
        return [(lk.model_key, lk.number, lineages[lk.lineage], lk.state, lk.alpha,
                 lk.statuses(), lk.n_checks, lk.new_study, lk.decision_key,
                 lk.other_data_looks, [(e["look"], e["shared_examples"]) for e in lk.earlier])
                for lk in looks]
    assert kept(postgres_url) == kept(tmp_path / "l.sqlite")


def _concurrent(target: str, jobs: int) -> list[tuple[int, float]]:
    return sorted((n, a) for _, n, a in concurrent_looks(target, jobs, sleep_s=0.3))


def test_concurrent_runs_get_the_same_looks_and_alphas_on_both(tmp_path, postgres_url):
    """Three runs reserving at once on one ledger: looks 1, 2, 3 with look k's alpha, the
    same split on SQLite and on PostgreSQL."""
    sqlite = _concurrent(str(tmp_path / "l.sqlite"), 3)
    postgres = _concurrent(postgres_url, 3)
    assert postgres == sqlite == [(k, pytest.approx(A * (1 - SPENDING_RATIO) *
                                                    SPENDING_RATIO ** (k - 1)))
                                  for k in (1, 2, 3)]


def _killed(target: str, marker: str, stage: str) -> None:
    """A run that stops forever inside its reservation (``stage`` "planning": the write
    transaction open, its lock held) or after it (``reserved``: the look committed, never
    decided); the test kills it there."""
    store = LedgerStore(target)

    def plan(alpha):
        if stage == "planning":
            Path(marker).write_text("in")
            time.sleep(600)
        return _planner()(alpha)

    _reserve(store, range(100), "killed", planner=plan)
    Path(marker).write_text("reserved")
    time.sleep(600)


def _kill_at(target: str, tmp_path: Path, stage: str) -> None:
    marker = tmp_path / f"marker-{stage}"
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_killed, args=(target, str(marker), stage))
    p.start()
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and p.is_alive():
        time.sleep(0.05)
    assert marker.exists(), "the run to kill never got there"
    p.kill()  # SIGKILL: no cleanup of any kind
    p.join(30)


def test_a_run_killed_inside_its_reservation_leaves_nothing(ledger_target, tmp_path):
    """Killed while it held the write lock: its transaction is rolled back (SQLite: the
    uncommitted WAL frames are ignored; PostgreSQL: the server drops the connection's
    transaction and its advisory lock), and the next run reserves look 1 at once."""
    LedgerStore(ledger_target).check()
    _kill_at(ledger_target, tmp_path, "planning")
    t0 = time.monotonic()
    res = _reserve(LedgerStore(ledger_target, timeout_s=60), range(100), "next")
    assert time.monotonic() - t0 < 30  # the lock died with the run
    assert res.kind == "new" and res.look.number == 1 and res.model_looks == 0
    assert [lk.decision_key for lk in LedgerStore(ledger_target).looks()] == ["next"]


def test_a_run_killed_after_reserving_leaves_its_look_charged(ledger_target, tmp_path):
    _kill_at(ledger_target, tmp_path, "reserved")
    store = LedgerStore(ledger_target)
    (stopped,) = store.looks(MODEL)
    assert stopped.state == "reserved" and stopped.number == 1
    assert "[reserved, never decided: the run stopped; still charged]" in \
        format_looks([stopped])[-1]
    nxt = _reserve(store, range(50, 150), "next")
    assert nxt.look.number == 2 and nxt.alpha.spent_before == stopped.alpha.alpha
    assert nxt.alpha.alpha == pytest.approx(A * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    _decide(store, nxt, "PASS")
    assert [lk.state for lk in store.looks(MODEL)] == ["reserved", "decided"]


def test_a_postgresql_writer_waits_for_the_lock_then_says_it_stayed_locked(postgres_url):
    import psycopg

    LedgerStore(postgres_url).check()
    held = threading.Event()

    def hold(seconds: float) -> None:
        with psycopg.connect(postgres_url, autocommit=True) as con:
            con.execute("BEGIN")
            con.execute("SELECT pg_advisory_xact_lock(%s)", (PG_LOCK_KEY,))
            held.set()
            time.sleep(seconds)
            con.execute("COMMIT")

    other = threading.Thread(target=hold, args=(0.6,))
    other.start()
    held.wait(30)
    t0 = time.monotonic()
    res = _reserve(LedgerStore(postgres_url, timeout_s=30), range(100), "k")
    other.join()
    assert res.look.number == 1 and time.monotonic() - t0 >= 0.4  # it waited for the lock
    held.clear()
    other = threading.Thread(target=hold, args=(3.0,))
    other.start()
    held.wait(30)
    with pytest.raises(LedgerError, match="stayed locked by another run for 0.3 s") as err:
        _reserve(LedgerStore(postgres_url, timeout_s=0.3), range(100), "k2")
    other.join()
    assert "\n" not in str(err.value)
    assert [lk.number for lk in LedgerStore(postgres_url).looks()] == [1]


def test_a_database_that_is_not_a_ledger_and_a_server_that_is_not_there(postgres_server):
    import psycopg

    url = postgres_server.new_database("other")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(LedgerError, match="this postgresql database is not a quantkit test "
                                          r"ledger \(tables \['invoices'\]\)"):
        LedgerStore(url).check()
    empty = postgres_server.new_database("empty")
    with pytest.raises(LedgerError, match="empty"):
        LedgerStore(empty, create=False).looks()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = f"postgresql://quantkit:{SECRET}@127.0.0.1:{port}/ledger"
    with pytest.raises(LedgerError, match="cannot connect to the team ledger") as err:
        LedgerStore(down, timeout_s=2).check()
    assert SECRET not in str(err.value) and "quantkit:***@127.0.0.1" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(LedgerError, match="must be PostgreSQL's"):
        LedgerStore(f"mysql://root:{SECRET}@db/ledger")


def test_a_missing_driver_is_one_error_with_the_url_and_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` fails
    with pytest.raises(LedgerError) as err:
        LedgerStore(f"postgresql://bob:{SECRET}@db.example:5432/ledger")
    msg = str(err.value)
    assert "psycopg 3, is not installed" in msg and "pip install 'psycopg[binary]" in msg
    assert "postgresql://bob:***@db.example:5432/ledger" in msg and SECRET not in msg


def test_the_password_is_masked_in_records_logs_and_errors(postgres_server, caplog, tmp_path):
    url = postgres_server.new_database().replace("quantkit@", f"quantkit:{SECRET}@")
    s = quantkit.configure(["experiment=bert_int8", f"verdict.ledger={url}"])
    where = ledger_location(s)
    assert where.url == url and SECRET not in where.describe() + repr(where)
    assert where.shown == mask_url(url) and "quantkit:***@" in where.shown
    cfg = quantkit.compose(["experiment=bert_int8", f"verdict.ledger={url}"])
    assert recorded_config(cfg, s)["verdict"]["ledger"] == where.shown
    assert mask_secrets(f"python -m quantkit verdict.ledger={url} seed=1") == \
        f"python -m quantkit verdict.ledger={where.shown} seed=1"
    ctx = SimpleNamespace(settings=s, cache_dir=tmp_path / "cache", run_dir=tmp_path / "run")
    with caplog.at_level("INFO"):
        check_ledger(ctx)  # the preflight: opens (creates) the team ledger
        res = _reserve(LedgerStore(where.target), range(100), "k")
    assert res.look.number == 1 and res.path == where.shown
    assert SECRET not in caplog.text and "PGPASSWORD or ~/.pgpass" in caplog.text
    # a URL copied from a record (password ***) connects without one (trust here; else
    # PGPASSWORD or ~/.pgpass)
    assert [lk.id for lk in LedgerStore(where.shown).looks()] == [res.look.id]
    bad = SimpleNamespace(settings=quantkit.configure(
        ["experiment=bert_int8", f"verdict.ledger=postgresql://quantkit:{SECRET}@127.0.0.1:1/x"]),
        cache_dir=tmp_path / "cache", run_dir=tmp_path / "run")
    with pytest.raises(LedgerError, match="cannot connect") as err:
        check_ledger(bad)
    assert SECRET not in str(err.value) and "at verdict.ledger" in str(err.value)


@pytest.mark.parametrize("override,match", [
    ("verdict.ledger=mysql://u@db/ledger", "names a mysql:// database"),
    (f"verdict.ledger=postgresql://u:{SECRET}@db:5432", "must name the ledger's database"),
    (f"verdict.ledger_path=postgresql://u:{SECRET}@db/ledger", "goes to verdict.ledger"),
    ("verdict.ledger=postgresql://u@db:port/ledger", "not a valid database URL"),
])
def test_settings_accept_a_postgresql_url_and_refuse_others(override, match):
    ok = quantkit.configure(["experiment=bert_int8", "verdict.ledger=postgres://u@db/ledger"])
    assert ok.verdict.ledger == "postgres://u@db/ledger"
    with pytest.raises(ConfigError, match=match) as err:
        quantkit.configure(["experiment=bert_int8", override])
    assert SECRET not in str(err.value)


def test_the_ci_script_installs_the_server_and_the_dev_extra_the_driver():
    root = Path(__file__).resolve().parents[1]
    ci = (root / ".ci" / "run").read_text()
    assert "postgresql" in ci and "will skip" in ci
    pyproject = (root / "pyproject.toml").read_text()
    assert "ledger-postgres = [" in pyproject and pyproject.count("psycopg[binary]") >= 2
    assert os.access(root / ".ci" / "run", os.X_OK)
