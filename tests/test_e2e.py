"""One real end-to-end run of the CLI on a reduced eval size (slow: exports MiniLM on a cold cache)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bert_int8_end_to_end(cli, e2e_run, tmp_path):
    args = ("data.eval.limit=300", "data.dev.limit=300", "progress=false",
            "ptq.recipe=bert",  # the pipeline is under test; ptq.recipe=auto: tests/run/test_recipe_choice.py
            "verdict.n_boot=500", "precision.search.max_full_evals=4",
            "precision.search.measure_top=8", "precision.search.subset=64", "compare.subset=64",
            "compare.backend_check_subset=64", "data.calib.num_samples=64",
            "bench.max_seconds=0.2", "bench.repeats=8")  # the stages are under test, not sizes
    r, run_dir, rec = e2e_run("bert_int8", *args)
    cands = rec["candidates"]
    assert rec["data"]["sizes"]["test"] == 300
    assert 0.65 <= cands["fp32"]["metrics"]["accuracy"] <= 0.9
    assert len(rec["data"]["sha256"]["test"]) == 64 and len(rec["model"]["sha256"]) == 64
    # every calibrator gave an INT8 candidate with a verdict, per-layer stats and INT8 kernels
    for m in ("minmax", "percentile", "entropy", "mse"):
        c = cands[f"int8.{m}"]
        assert c["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE")
        assert c["verdict"]["reasons"]
        assert c["plan_counts"]["int8"] > 0 and c["lint"]["violations"] == 0
        assert c["layers"] and all(v["count"] > 0 for v in c["layers"].values())
        assert any("Integer" in k or "QLinear" in k for k in c["kernel_census"])
        assert (run_dir / f"model.int8.{m}.onnx").is_file()
        assert (run_dir / "ranges" / f"{m}.json").is_file()
    assert cands["fp16"]["verdict"]["status"] in ("PASS", "INCONCLUSIVE")
    assert "mixed" in cands and rec["search"]["full_evals"] <= rec["search"]["bound"]
    assert set(rec["stages"]) >= {"data", "model", "fp32_reference", "calibration", "evaluate"}
    # every candidate was timed on this CPU, labelled as such, with a cost projection
    for name in cands:
        assert cands[name]["latency"]["1"]["p50_ms"] > 0, name
    assert rec["latency"]["device"] == "CPU" and "NOT a prediction of TensorRT" in rec["latency"]["caveat"]
    assert set(rec["latency"]["cost"]["per_candidate"]) == set(cands)
    assert "Cost projection" in (run_dir / "report.md").read_text()
    # the signed candidate exports as a Triton model repository that passes its structural check
    tri = subprocess.run([sys.executable, "-m", "quantkit.export.triton", str(run_dir), "--out",
                          str(tmp_path / "triton")], capture_output=True, text=True)
    assert tri.returncode == (0 if rec["recommended"] else 2), tri.stderr
    sums = (run_dir / "SHA256SUMS").read_text()
    assert "model.int8.minmax.onnx" in sums and "model.mixed.onnx" in sums
    # the artifacts quantkit writes pass its own TensorRT-rules lint from the CLI
    lint = subprocess.run([sys.executable, "-m", "quantkit.cli.lint_cmd", str(run_dir / "model.mixed.onnx")],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "fp32 " in r.stdout and "recommended:" in r.stdout
    # a second run without the stage cache recomputes every stage: it reuses the prepared
    # model (and says so) and gives an identical record apart from timestamps and durations
    r2 = cli("experiment=bert_int8", *args, "stage_cache=false")
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "prepared model reused from cache" in r2.stdout
    assert "using cached prepared model" in (r2.stdout + r2.stderr)
    runs = sorted((tmp_path / "experiments" / "bert_int8").glob("*/record.json"))
    assert len(runs) == 2
    rec2 = json.loads(runs[1].read_text())
    # the first run may have prepared the model or found it (an empty or a warm cache: the
    # session's minilm_model fixture may have made it); the second run always finds it
    assert isinstance(rec["model"].pop("cached"), bool) and rec2["model"].pop("cached") is True
    assert comparable(rec) == comparable(rec2)


VOLATILE = {"run_dir", "started", "finished", "stages", "stage_cache", "notes", "seconds",
            "eval_seconds", "command", "latency",  # latency: timings, never deterministic
            "read_from_ledger",  # a rerun reads the same look's decision from the test ledger
            # ... and the ledger then knows the model: what it knew before the run differs
            "model_looks", "first_in_ledger", "ledger_knows",
            "job"}  # where and how it ran: launcher, worker host, pid, attempt


def comparable(obj):
    """The record without what legitimately differs between runs: times and paths."""
    if isinstance(obj, dict):
        return {k: comparable(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [comparable(v) for v in obj]
    return obj
