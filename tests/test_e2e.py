"""One real end-to-end run of the CLI on a reduced eval size (slow: exports MiniLM on a cold cache)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_bert_int8_end_to_end(cli, tmp_path):
    args = ("experiment=bert_int8", "data.eval.limit=300", "progress=false",
            "verdict.n_boot=500", "precision.search.max_full_evals=4")
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = sorted((tmp_path / "experiments" / "bert_int8").glob("*/record.json"))
    assert len(runs) == 1
    rec = json.loads(runs[0].read_text())
    fp32 = rec["candidates"]["fp32"]["metrics"]
    assert rec["data"]["sizes"]["eval"] == 300
    assert 0.65 <= fp32["accuracy"] <= 0.9
    assert len(rec["data"]["sha256"]["eval"]) == 64 and len(rec["model"]["sha256"]) == 64
    assert "fp32 " in r.stdout and "accuracy" in r.stdout
    # the second run reuses the prepared model and says so
    r2 = cli(*args)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "prepared model reused from cache" in r2.stdout
    assert "using cached prepared model" in (r2.stdout + r2.stderr)
