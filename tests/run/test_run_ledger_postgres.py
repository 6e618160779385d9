"""A team test ledger on PostgreSQL through the real CLI on the tiny world (issue 49 point 3):
runs on a ``verdict.ledger=postgresql://`` ledger are looks 1 and 2 of the model at their
alphas, the URL's password is in no record, report, log line or output, ``quantkit ledger``
reads the ledger a record names, and its looks exported into a SQLite file keep counting
there (three tiny runs against a server the tests start: tests/pg_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tinyworld

from quantkit.verdict.ledger import SPENDING_RATIO

A = 0.025
LOOK = [A * (1 - SPENDING_RATIO) * SPENDING_RATIO ** k for k in range(3)]
SECRET = "s3cret-pw"


def _run(world, name, ledger, *extra):
    run_dir = world["root"] / name
    args = tinyworld.override(tinyworld.cli_args(world), f"hydra.run.dir={run_dir}",
                              "precision.search.enabled=false", f"verdict.ledger={ledger}",
                              *extra)
    r = tinyworld.run_quantkit(args, cwd=world["root"])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((run_dir / "record.json").read_text()), r, run_dir


def _ledger(*args):
    return subprocess.run([sys.executable, "-m", "quantkit", "ledger", *map(str, args)],
                          capture_output=True, text=True)


def test_runs_on_a_postgresql_ledger_are_charged_and_never_show_its_password(
        tmp_path_factory, postgres_server):
    world = tinyworld.make_world(tmp_path_factory.mktemp("pg-ledger-world"))
    url = postgres_server.new_database().replace("quantkit@", f"quantkit:{SECRET}@")
    shown = url.replace(SECRET, "***")
    first, r1, dir1 = _run(world, "first", url)
    seed1, r2, dir2 = _run(world, "seed1", url, "seed=1")
    led1, led2 = first["signoff"]["ledger"], seed1["signoff"]["ledger"]
    assert (led1["look"], led2["look"]) == (1, 2) and led2["lineage"] == led1["lineage"]
    assert led1["alpha_one_sided"] == pytest.approx(LOOK[0])
    assert led2["alpha_one_sided"] == pytest.approx(LOOK[1])
    assert led1["path"] == shown and led1["location"] == "verdict.ledger"
    assert f"first look in {shown}" in led1["ledger_knows"]
    assert "look 2 of this model on these test examples: one-sided alpha 0.00225" in r2.stdout
    for rec, r, run_dir in ((first, r1, dir1), (seed1, r2, dir2)):
        assert rec["config"]["verdict"]["ledger"] == shown and shown in rec["command"]
        assert "PGPASSWORD or ~/.pgpass" in r.stdout + r.stderr  # the preflight's warning
        texts = [r.stdout, r.stderr, json.dumps(rec)]
        texts += [p.read_text(encoding="utf-8") for p in run_dir.iterdir()
                  if p.suffix in (".md", ".html", ".log", ".json")]
        assert not [t[:80] for t in texts if SECRET in t]
    # `quantkit ledger RUN_DIR`: the record's URL (password ***) connects without one here
    listing = _ledger(dir2)
    assert listing.returncode == 0, listing.stderr
    assert f"test ledger {shown.replace(':***', '')}" in listing.stdout  # none to mask
    assert SECRET not in listing.stdout
    assert led1["look_id"][:12] in listing.stdout and led2["look_id"][:12] in listing.stdout
    # a CI ledger's looks, exported and imported into a host's SQLite ledger, keep counting
    out, host = world["root"] / "looks.jsonl", world["root"] / "host.sqlite"
    assert _ledger("export", out, "--db", led1["path"]).returncode == 0
    imported = _ledger("import", out, "--db", host)
    assert imported.returncode == 0 and "2 look(s) added" in imported.stdout, imported.stderr
    third, _, _ = _run(world, "margin", host, "verdict.margin=0.02")
    led3 = third["signoff"]["ledger"]
    assert led3["look"] == 3 and led3["lineage"] == led1["lineage"]
    assert led3["alpha_one_sided"] == pytest.approx(LOOK[2])
    assert [e["id"] for e in led3["earlier_looks"]] == [led1["look_id"], led2["look_id"]]
