"""Sweep comparison: ranking order, rendering, and the `python -m quantkit.cli.sweep_cmd` CLI."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import bare_record, candidate, latency

from quantkit.errors import ConfigError
from quantkit.report.sweep_report import render_sweep, sweep_summary


def _job(record, name: str, candidates: dict[str, tuple]) -> dict:
    """A record whose candidates have (status, accuracy, delta low[, p50_ms]) as given."""
    rec = copy.deepcopy(record)
    rec["run_dir"] = f"/runs/{name}"
    template = rec["candidates"]["int8.minmax"]
    rec["candidates"] = {"fp32": rec["candidates"]["fp32"]}
    for cname, spec in candidates.items():
        status, acc, low, *lat = spec
        c = copy.deepcopy(template)
        c["verdict"]["status"] = status
        c["metrics"]["accuracy"] = acc
        c["verdict"]["deltas"]["accuracy"]["low"] = low
        if lat:
            c["latency"] = {"8": latency(lat[0] * 4, batch=8), "1": latency(lat[0])}
        rec["candidates"][cname] = c
    return rec


def _order(summary) -> list[tuple[str, str]]:
    return [(r["label"], r["candidate"]) for r in summary["rows"]]


def test_ranking_verdict_then_metric_then_lower_bound_then_latency(record):
    a = _job(record, "a", {"x": ("FAIL", 0.99, 0.0), "y": ("INCONCLUSIVE", 0.80, -0.01),
                           "z": ("PASS", 0.70, -0.005)})
    b = _job(record, "b", {"x": ("PASS", 0.75, -0.002), "y": ("PASS", 0.75, -0.0005),
                           "z": ("INCONCLUSIVE", 0.90, -0.02)})
    c = _job(record, "c", {"fast": ("PASS", 0.75, -0.001, 1.0), "slow": ("PASS", 0.75, -0.001, 2.0),
                           "none": ("PASS", 0.75, -0.001)})
    s = sweep_summary([a, b, c])
    assert _order(s) == [
        ("b", "y"),                                               # PASS 0.75, low -0.0005
        ("c", "fast"), ("c", "slow"), ("c", "none"),              # PASS 0.75, low -0.001, latency
        ("b", "x"),                                               # PASS 0.75, low -0.002
        ("a", "z"),                                               # PASS 0.70
        ("b", "z"), ("a", "y"),                                   # INCONCLUSIVE by metric
        ("a", "x")]                                               # FAIL last despite 0.99
    assert [r["rank"] for r in s["rows"]] == list(range(1, 10))
    assert s["best"]["candidate"] == "y" and s["best"]["label"] == "b"
    fast = next(r for r in s["rows"] if r["candidate"] == "fast")
    assert fast["latency_batch"] == "1" and fast["latency_p50_ms"] == 1.0
    assert all(r["candidate"] != "fp32" for r in s["rows"])  # the reference is not ranked


def test_real_record_ranking(record):
    s = sweep_summary([record], labels=["job0"])
    statuses = [r["status"] for r in s["rows"]]
    assert statuses == sorted(statuses, key=["PASS", "INCONCLUSIVE", "FAIL"].index)
    assert s["rows"][0]["candidate"] == "int8.minmax" and s["rows"][0]["recommended"]
    assert s["jobs"][0]["label"] == "job0" and s["jobs"][0]["recommended_status"] == "PASS"


def test_two_real_runs(record, record_search):
    s = sweep_summary([record, record_search])
    assert len(s["rows"]) == 5 + 6  # fp16 + 4 INT8 in both, plus the searched "mixed"
    assert [r["status"] for r in s["rows"][:5]] == ["PASS"] * 5
    assert {(r["label"], r["candidate"]) for r in s["rows"] if r["recommended"]} == {
        ("out3", "int8.minmax"), ("out5", "mixed")}


def test_next_step_names_the_best_jobs_command_when_jobs_skipped_the_search(record, tmp_path):
    a = _job(record, "a", {"int8.minmax": ("INCONCLUSIVE", 0.76, -0.01)})
    b = _job(record, "b", {"int8.mse": ("PASS", 0.77, -0.002)})
    for rec, cal in ((a, "minmax"), (b, "mse")):
        rec["command"] = f"python -m quantkit experiment=bert_int8 calibrator={cal}"
        rec["search"] = {"skipped": "sweep job"}
    s = sweep_summary([a, b])
    assert s["next_step"] == "python -m quantkit experiment=bert_int8 calibrator=mse"
    paths = render_sweep([a, b], tmp_path)
    for fmt in ("md", "html"):
        assert "calibrator=mse" in paths[fmt].read_text().split("## Ranking")[0].split('id="ranking"')[0]
    b["search"] = {}  # the best job ran its search (nothing skipped): nothing to add
    assert sweep_summary([a, b])["next_step"] is None


def test_sweep_ranks_on_dev_evidence_not_on_the_test_sign_off(record):
    """A signed-off family member carries test evidence at the top and its dev evidence in
    ``dev``: the sweep ranks on dev (choosing on test would be a look at test per job)."""
    a = _job(record, "a", {"int8.mse": ("PASS", 0.77, -0.002)})
    b = _job(record, "b", {"int8.mse": ("PASS", 0.76, -0.004)})
    # test says a > b; dev says b > a (b PASSes on dev, a is INCONCLUSIVE there)
    for rec, status, acc in ((a, "INCONCLUSIVE", 0.74), (b, "PASS", 0.75)):
        c = rec["candidates"]["int8.mse"]
        dev = copy.deepcopy({k: c[k] for k in ("metrics", "verdict", "n")})
        dev["verdict"]["status"], dev["metrics"]["accuracy"] = status, acc
        dev["split"] = "dev"
        c["dev"] = dev
    s = sweep_summary([a, b])
    assert _order(s) == [("b", "int8.mse"), ("a", "int8.mse")]
    assert s["rows"][0]["value"] == 0.75 and s["rows"][0]["status"] == "PASS"
    assert "dev" in s["ranking"]


def test_labels_must_match(record):
    with pytest.raises(ConfigError):
        sweep_summary([record, record], labels=["only one"])


def test_render_sweep_is_deterministic(record, tmp_path):
    a = render_sweep([record, record], tmp_path / "a", labels=["0", "1"])
    b = render_sweep([record, record], tmp_path / "b", labels=["0", "1"])
    assert set(a) == {"md", "html"}
    for fmt in a:
        assert a[fmt].read_bytes() == b[fmt].read_bytes()
    html = a["html"].read_text()
    assert "int8.minmax" in html and "PASS" in html and "not measured" in html


def test_jobs_table_names_launcher_worker_host_cache_hits_and_jobs_that_ran_again(record, tmp_path):
    first = copy.deepcopy(record)
    first["job"] = {"launcher": "RayLauncher", "worker_host": "node-a", "pid": 1, "attempt": 1,
                    "earlier_finished": False}
    first["stage_cache"] = {"fp32_reference": {"hits": 0, "misses": 1},
                            "calibrate": {"hits": 1, "misses": 0}}
    reread = copy.deepcopy(first)
    reread["job"] = {**first["job"], "worker_host": "node-b", "attempt": 2, "earlier_finished": True}
    reread["stage_cache"] = {"fp32_reference": {"hits": 1, "misses": 0},
                             "calibrate": {"hits": 1, "misses": 0}}
    lost = copy.deepcopy(first)
    lost["job"] = {**first["job"], "attempt": 2, "earlier_finished": False}
    summary = sweep_summary([first, reread, lost], labels=["0", "1", "2"])
    assert [(j["launcher"], j["worker_host"], j["cache_hits"], j["computed"], j["ran_again"],
             j["rerun_of_finished"]) for j in summary["jobs"]] == [
        ("RayLauncher", "node-a", 1, ["fp32_reference"], False, False),
        ("RayLauncher", "node-b", 2, [], False, True),
        ("RayLauncher", "node-a", 1, ["fp32_reference"], True, False)]
    md = render_sweep([first, reread, lost], tmp_path, labels=["0", "1", "2"])["md"].read_text()
    assert "Ran again after a lost attempt: 2." in md
    assert "Rerun after finishing before (their finished stages read from the stage cache): 1." in md
    assert "| RayLauncher | node-b | 2 hit(s), 0 computed | attempt 2: had finished before; rerun |" in md
    assert "1 hit(s), 1 computed (fp32_reference) | attempt 2: ran again" in md
    # a plain record (no job facts) still renders, the host from record.host
    old = {k: v for k, v in record.items() if k != "job"}
    assert sweep_summary([old])["jobs"][0]["worker_host"] == record["host"]["hostname"]


def test_render_sweep_without_verdicts(tmp_path):
    paths = render_sweep([bare_record(experiment="e", candidates={"fp32": candidate()})],
                         tmp_path)
    assert "No candidate with a verdict" in paths["md"].read_text()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quantkit", "sweep", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_cli_ranks_a_multirun_dir(record, tmp_path):
    for job in ("0", "1"):
        (tmp_path / job).mkdir()
        (tmp_path / job / "record.json").write_text(json.dumps(record))
    (tmp_path / "1" / "report.html").write_text("<html></html>")
    r = _cli(str(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    printed = r.stdout.split()
    assert printed == [str(tmp_path / "sweep.md"), str(tmp_path / "sweep.html")]
    md = (tmp_path / "sweep.md").read_text()
    assert "2 job(s), 10 ranked candidate(s)" in md
    assert "[1](1/report.html)" in md  # link to the job that has a report
    assert 'href="1/report.html"' in (tmp_path / "sweep.html").read_text()
    # rerunning rebuilds the same files
    first = (tmp_path / "sweep.html").read_bytes()
    assert _cli(str(tmp_path), cwd=tmp_path).returncode == 0
    assert (tmp_path / "sweep.html").read_bytes() == first


@pytest.mark.parametrize("setup", ["empty", "missing", "corrupt"])
def test_cli_fails_cleanly(tmp_path, setup):
    target = tmp_path / "multirun"
    if setup != "missing":
        target.mkdir()
    if setup == "corrupt":
        (target / "0").mkdir()
        (target / "0" / "record.json").write_text("{not json")
    r = _cli(str(target), cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (target / "sweep.md").exists()
