"""The persistent test ledger through the real CLI on the tiny world: a rerun with another
seed or margin is another look at the same test examples and is charged; an identical rerun
reads the decision; two concurrent runs are both recorded; an underpowered family is not
tested; ``quantkit ledger`` lists the looks (slow-ish: about ten tiny runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tinyworld

from quantkit.verdict.ledger import SPENDING_RATIO

A = 0.025  # the declared one-sided alpha (verdict.alpha=0.05)
LOOK = [A * (1 - SPENDING_RATIO) * SPENDING_RATIO ** k for k in range(6)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tinyworld.make_world(tmp_path_factory.mktemp("ledger-world"))


def _run(world, name, *extra, wait=True):
    run_dir = world["root"] / name
    args = tinyworld.override(tinyworld.cli_args(world), f"hydra.run.dir={run_dir}",
                              "precision.search.enabled=false", *extra)
    if not wait:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.pop("QUANTKIT_ERROR_FILE", None)
        return subprocess.Popen([sys.executable, "-m", "quantkit", *args], cwd=world["root"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True), run_dir
    r = tinyworld.run_quantkit(args, cwd=world["root"])
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((run_dir / "record.json").read_text()), r.stdout


def _ledger(*args, env=None):
    return subprocess.run([sys.executable, "-m", "quantkit", "ledger", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def looks(world):
    """Look 1 (seed 0), look 2 (seed 1: test re-drawn from the same pool), look 3 (seed 0,
    another margin), then an identical rerun of look 1."""
    return {name: _run(world, name, *extra) for name, extra in [
        ("first", ()), ("seed1", ("seed=1",)), ("margin", ("verdict.margin=0.02",)),
        ("again", ())]}


def test_first_look_is_tested_at_its_share_of_alpha_and_says_so(looks):
    rec, out = looks["first"]
    led = rec["signoff"]["ledger"]
    assert led["look"] == 1 and led["earlier_looks"] == [] and not led["read_from_ledger"]
    assert led["alpha_one_sided"] == pytest.approx(LOOK[0]) and led["alpha_declared"] == A
    assert rec["signoff"]["alpha_one_sided"] == pytest.approx(LOOK[0])
    assert rec["signoff"]["decision"]["look"]["look"] == 1
    for name in rec["signoff"]["family"]["candidates"]:
        c = rec["candidates"][name]
        assert c["split"] == "test" and c["signoff"]["look"] == 1
        assert c["verdict"]["signoff"]["alpha_one_sided"] == pytest.approx(LOOK[0])
        assert any("look 1 of this model on these test examples" in r
                   for r in c["verdict"]["reasons"])
    assert "test ledger: look 1 of this model on these test examples: one-sided alpha 0.0225" \
        in out
    md = open(os.path.join(rec["run_dir"], "report.md"), encoding="utf-8").read()
    assert "Test ledger: look 1 of this model" in md and "| planned power | tested |" in md


def test_another_seed_is_a_second_look_at_the_same_test_data_and_is_charged(looks):
    first, _ = looks["first"]
    rec, out = looks["seed1"]
    assert rec["data"]["sha256"]["test"] != first["data"]["sha256"]["test"]  # re-drawn
    led = rec["signoff"]["ledger"]
    assert led["look"] == 2 and led["lineage"] == first["signoff"]["ledger"]["lineage"]
    (e,) = led["earlier_looks"]
    assert e["id"] == first["signoff"]["ledger"]["look_id"] and e["shared_examples"] > 0
    assert led["alpha_one_sided"] == pytest.approx(LOOK[1])
    assert led["spent_before"] == pytest.approx(LOOK[0])
    assert "look 2 of this model on these test examples: one-sided alpha 0.00225" in out


def test_another_margin_on_the_same_examples_is_a_third_look(looks):
    """Every test output of this run came from the stage cache: a new decision from cached
    test logits is still a recorded, charged look."""
    rec, _ = looks["margin"]
    assert rec["stage_cache"]["evaluation"]["misses"] == 0
    led = rec["signoff"]["ledger"]
    assert led["look"] == 3 and led["alpha_one_sided"] == pytest.approx(LOOK[2])
    assert [e["look"] for e in led["earlier_looks"]] == [1, 2]
    first = looks["first"][0]
    shared = {e["look"]: e["shared_examples"] for e in led["earlier_looks"]}
    assert shared[1] == first["signoff"]["ledger"]["n_examples"]  # the very same examples


def test_an_identical_rerun_reads_the_decision_instead_of_testing_again(looks, world):
    first, _ = looks["first"]
    rec, out = looks["again"]
    led = rec["signoff"]["ledger"]
    assert led["read_from_ledger"] and led["look"] == 1
    assert led["look_id"] == first["signoff"]["ledger"]["look_id"]
    assert rec["signoff"]["decision"] == first["signoff"]["decision"]
    assert "sign-off read from the test ledger" in out
    html = open(os.path.join(rec["run_dir"], "report.html"), encoding="utf-8").read()
    assert "read from the ledger" in html and 'id="signoff-ledger"' in html
    r = _ledger(world["root"] / "again")  # a run dir: its record names model and ledger
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("  ") and "look id" not in ln]
    assert len(rows) == 3, r.stdout  # the read added no look


def test_two_concurrent_runs_are_both_recorded(looks, world):
    procs = [_run(world, f"conc{i}", f"verdict.margin=0.0{i + 3}", wait=False) for i in (0, 1)]
    for p, _ in procs:
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
    got = sorted(json.loads((d / "record.json").read_text())["signoff"]["ledger"]["look"]
                 for _, d in procs)
    assert got == [4, 5]
    r = _ledger(world["root"] / "conc0" / "record.json", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [x["look"] for x in listed] == [1, 2, 3, 4, 5]
    assert sum(x["alpha_one_sided"] for x in listed) <= A
    assert all(x["state"] == "decided" for x in listed)


def test_an_underpowered_family_is_not_tested_and_no_look_is_written(looks, world):
    rec, out = _run(world, "powerless", "verdict.min_power=0.5", "verdict.margin=0.05")
    so = rec["signoff"]
    assert so["decision"] is None and so["family"]["candidates"] == []
    assert so["ledger"]["look"] is None and so["ledger"]["look_id"] is None
    assert set(so["not_tested"]) == {r["candidate"] for r in so["power_plan"]["rows"]}
    assert all(r["tested"] is False and r["planned_power"] == 0.0
               for r in so["power_plan"]["rows"])  # 24 test examples < verdict.min_n
    assert all(rec["candidates"][n]["split"] == "dev" for n in so["not_tested"])
    assert rec["recommended"] is None and "planned power" in rec["recommendation"]["reason"]
    assert "not tested:" in out
    html = open(os.path.join(rec["run_dir"], "report.html"), encoding="utf-8").read()
    assert "No declared member was tested" in html and "not tested: " in html
    model = rec["model"]["sha256"]
    r = _ledger(model[:12], "--db", so["ledger"]["path"], "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 5  # unchanged


def test_ledger_command_lists_looks_and_fails_in_one_line(looks, world, tmp_path):
    rec, _ = looks["first"]
    db = rec["signoff"]["ledger"]["path"]
    r = _ledger(rec["model"]["sha256"][:8], "--db", db)
    assert r.returncode == 0, r.stderr
    key = rec["signoff"]["ledger"]["model_key"]  # the model's fingerprint, its file listed
    assert f"model {key[:12]}" in r.stdout and "look id" in r.stdout
    assert f"FP32 model files {rec['model']['sha256'][:12]}" in r.stdout
    assert rec["signoff"]["ledger"]["look_id"][:12] in r.stdout
    assert "fixed_sequence accuracy" in r.stdout and "(0.025)" in r.stdout
    missing = _ledger("--db", tmp_path / "none.sqlite")
    assert missing.returncode == 2 and "no test ledger here" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 500)
    corrupt = _ledger("--db", bad)
    assert corrupt.returncode == 2 and "corrupt" in corrupt.stderr
    assert len(corrupt.stderr.strip().splitlines()) == 1
    unknown = _ledger("ffffffff", "--db", db)
    assert unknown.returncode == 2 and "no look of this model" in unknown.stderr


@pytest.mark.slow
def test_bert_int8_with_another_seed_or_margin_is_a_charged_second_look(minilm_model, cli,
                                                                       tmp_path):
    """The issue's acceptance case on the real default experiment (reduced sizes): seed 1
    fits another head (another FP32 file) and re-draws the test split from the same pool,
    yet it is look 2 of the same model on the same test data; another margin is look 3."""
    args = ["experiment=bert_int8", "data.test.limit=1000", "data.dev.limit=300",
            "data.calib.num_samples=64", "calibrator=minmax", "precision.search.enabled=false",
            "bench.enabled=false", "compare.subset=32", "compare.backend_check_subset=32",
            "verdict.n_boot=300", "verdict.min_power=0", "progress=false",
            "ptq.recipe=generic"]  # the ledger is under test, not the recipe choice
    recs = []
    for i, extra in enumerate([(), ("seed=1",), ("verdict.margin=0.02",)]):
        r = cli(*args, *extra, f"hydra.run.dir={tmp_path / f'run{i}'}")
        assert r.returncode == 0, r.stderr[-3000:]
        recs.append(json.loads((tmp_path / f"run{i}" / "record.json").read_text()))
    first, seed1, margin = (x["signoff"]["ledger"] for x in recs)
    assert recs[0]["model"]["sha256"] != recs[1]["model"]["sha256"]  # another head
    assert first["model_key"] == seed1["model_key"] == margin["model_key"]
    assert [first["look"], seed1["look"], margin["look"]] == [1, 2, 3]
    assert seed1["lineage"] == first["lineage"] and seed1["earlier_looks"][0]["shared_examples"]
    assert seed1["alpha_one_sided"] == pytest.approx(LOOK[1])
    assert margin["alpha_one_sided"] == pytest.approx(LOOK[2])
