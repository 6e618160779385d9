"""The test ledger keyed by what the test is about (issue 49), through the real CLI on the
tiny world: the default ledger lives in the user data dir, so a new cache dir and seed is
look 2; the same test texts with other whitespace, and the same network re-exported, are the
same examples and model; fresh data of a model is charged to it unless a new study is
declared; a decided look's artifacts run on another execution are its execution check
(nothing charged); a ledger file of random bytes stops the run in its preflight."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnx
import pytest

import tinyworld

from quantkit.verdict.ledger import SPENDING_RATIO

A = 0.025
LOOK = [A * (1 - SPENDING_RATIO) * SPENDING_RATIO ** k for k in range(4)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return tinyworld.make_world(tmp_path_factory.mktemp("identity-world"))


def _run(world, name, *extra, ok=True):
    run_dir = world["root"] / name
    args = tinyworld.override(tinyworld.cli_args(world), f"hydra.run.dir={run_dir}",
                              "precision.search.enabled=false", *extra)
    r = tinyworld.run_quantkit(args, cwd=world["root"])
    if not ok:
        return r, run_dir
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((run_dir / "record.json").read_text()), r.stdout


def _led(rec):
    return rec["signoff"]["ledger"]


def _ledger_json(path):
    r = subprocess.run([sys.executable, "-m", "quantkit", "ledger", "--db", str(path), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_new_cache_dir_and_seed_is_look_2_in_the_default_ledger(world, tmp_path, monkeypatch):
    """H1: the ledger is not in the cache. The first run names the ledger it is the first
    look in; the second (another seed, another cache dir) is charged as look 2."""
    data = tmp_path / "data-home"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    ledger = data / "quantkit" / "ledger.sqlite"
    first, out1 = _run(world, "default1", "verdict.ledger=null",
                       f"cache_dir={tmp_path / 'cache1'}",
                       f"stage_cache_dir={tmp_path / 'cache1' / 'stages'}")
    led = _led(first)
    assert led["path"] == str(ledger) and led["location"] == "default"
    assert led["look"] == 1 and led["first_in_ledger"] is True and led["model_looks"] == 0
    knows = f"first look in {ledger} (the default: the user data dir); looks kept elsewhere " \
            "are not counted"
    assert led["ledger_knows"] == knows and f"test ledger: {knows}" in out1
    md = open(os.path.join(first["run_dir"], "report.md"), encoding="utf-8").read()
    assert knows in md
    second, out2 = _run(world, "default2", "verdict.ledger=null", "seed=1",
                        f"cache_dir={tmp_path / 'cache2'}",
                        f"stage_cache_dir={tmp_path / 'cache2' / 'stages'}")
    led2 = _led(second)
    assert led2["path"] == str(ledger) and led2["look"] == 2
    assert led2["alpha_one_sided"] == pytest.approx(LOOK[1]) and not led2["first_in_ledger"]
    assert "look 2 of this model on these test examples: one-sided alpha 0.00225" in out2
    assert f"1 earlier look(s) of this model in {ledger}" in out2
    assert not (tmp_path / "cache1" / "ledger.sqlite").exists()


def test_the_same_texts_with_other_whitespace_are_the_same_examples(world):
    """H1: a trailing space or a run of spaces made new examples (hashed after reading)."""
    base, _ = _run(world, "ws0")
    spaced = [{**r, "text": "  " + r["text"].replace(" ", "  ") + " "}
              for r in tinyworld.rows()]
    csv = tinyworld.write_csv(world["root"] / "spaced.csv", spaced)
    rec, _ = _run(world, "ws1", f"data.path={csv}")
    assert rec["data"]["sha256"]["test"] != base["data"]["sha256"]["test"]  # other bytes
    led = _led(rec)
    assert led["look"] == _led(base)["look"] + 1 and led["lineage"] == _led(base)["lineage"]
    assert led["earlier_looks"][-1]["shared_examples"] == _led(base)["n_examples"]


def test_a_re_exported_model_is_the_same_model(world):
    """H1: the same network saved again (renamed nodes and tensors) was a new model (its
    file sha256); its fingerprint is the same."""
    base, _ = _run(world, "rx0", "verdict.margin=0.02")
    m = onnx.load(str(world["model"]))
    for k, node in enumerate(m.graph.node):
        node.name = f"/exported/{k}"
    path = world["root"] / "re-exported.onnx"
    onnx.save(m, str(path))
    rec, _ = _run(world, "rx1", f"model.path={path}", "verdict.margin=0.02")
    assert rec["model"]["sha256"] != base["model"]["sha256"]
    led, led0 = _led(rec), _led(base)
    assert led["model_key"] == led0["model_key"] and led["look"] == led0["look"] + 1
    assert "fingerprint" in led["model_key_basis"]
    other = tinyworld.write_model(world["root"] / "other.onnx", tinyworld.text_model(seed=3))
    rec3, _ = _run(world, "rx2", f"model.path={other}", "verdict.margin=0.02")
    assert _led(rec3)["model_key"] != led0["model_key"] and _led(rec3)["look"] == 1
    named, _ = _run(world, "rx3", f"model.path={other}", "model.id=tiny-sentiment")
    assert _led(named)["model_key_basis"] == "declared model.id 'tiny-sentiment'"


def test_fresh_data_is_charged_to_the_model_unless_a_new_study_is_declared(tmp_path):
    """H2: a re-test on fresh, non-overlapping data started a fresh budget."""
    w = tinyworld.make_world(tmp_path / "fresh")
    first, _ = _run(w, "f0")
    fresh = tinyworld.write_csv(w["root"] / "fresh.csv", tinyworld.rows(seed=7))
    rec, out = _run(w, "f1", f"data.path={fresh}")
    led = _led(rec)
    assert led["look"] == 2 and led["joined_by"] == "model"
    assert led["earlier_looks"][0]["shared_examples"] == 0
    assert led["alpha_one_sided"] == pytest.approx(LOOK[1])
    assert "every look of a model counts" in out
    newer = tinyworld.write_csv(w["root"] / "newer.csv", tinyworld.rows(seed=11))
    study, out2 = _run(w, "f2", f"data.path={newer}", "verdict.new_study='reviews of 2026-12'")
    led2 = _led(study)
    assert led2["look"] == 1 and led2["joined_by"] == "new_study"
    assert led2["new_study"] == "reviews of 2026-12" and led2["lineage"] != led["lineage"]
    assert "new study declared (verdict.new_study): reviews of 2026-12" in out2
    html = open(os.path.join(study["run_dir"], "report.html"), encoding="utf-8").read()
    assert "New study declared (verdict.new_study): reviews of 2026-12" in html
    listed = _ledger_json(led2["path"])
    assert [x["look"] for x in listed] == [1, 2, 1]
    assert [x["new_study"] for x in listed] == [None, None, "reviews of 2026-12"]


def test_another_execution_of_a_decided_look_is_its_check_and_charges_nothing(tmp_path):
    """The same artifacts on the same test data run another way (backend=trt after ONNX
    Runtime; here ORT's fused integer kernels after exact Q/DQ, since tensorrt is not
    installed here): the look's execution check, tested at its alpha, charged nothing; a
    member PASSes only where both executions PASS."""
    w = tinyworld.make_world(tmp_path / "exec")
    first, _ = _run(w, "e0")
    rec, out = _run(w, "e1", "backend.qdq_mode=fused")
    led = _led(rec)
    check = led["execution_check"]
    assert led["look"] == 1 and led["look_id"] == _led(first)["look_id"]
    assert led["alpha_one_sided"] == pytest.approx(LOOK[0])
    assert check["of_look"] == _led(first)["look_id"] and "Q/DQ exact" in \
        check["first_execution"]
    assert set(check["statuses"]) == set(first["signoff"]["family"]["candidates"])
    assert "execution check" in out and "charged nothing" in out
    (listed,) = _ledger_json(led["path"])  # no look added; the check is listed with it
    assert listed["execution_checks"] == 1 and listed["id"] == led["look_id"]
    text = subprocess.run([sys.executable, "-m", "quantkit", "ledger", "--db", led["path"]],
                          capture_output=True, text=True).stdout
    assert "+ 1 execution check(s)" in text


def test_a_ledger_of_random_bytes_stops_the_run_before_any_work(world, tmp_path):
    bad = tmp_path / "ledger.sqlite"
    bad.write_bytes(os.urandom(8192))
    r, run_dir = _run(world, "bad-ledger", f"verdict.ledger={bad}", ok=False)
    assert r.returncode == 2
    err = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("quantkit")]
    assert len(err) == 1 and "not a readable quantkit ledger" in err[0] and str(bad) in err[0]
    assert "Fix:" in err[0]
    assert tinyworld.debris(run_dir, world["stages"] / "none") == []
