"""Sweeps through Hydra launcher plugins: joblib runs for real; the cluster examples compose."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[1] / "conf"

TINY = ("experiment=bert_int8", "data.eval.limit=64", "data.dev.limit=64", "data.calib.num_samples=32",
        "compare.subset=16", "compare.backend_check_subset=32", "verdict.n_boot=200",
        "progress=false", "ptq.recipe=generic")  # the launchers are under test, not ptq.recipe=auto


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None,
                    reason="hydra-joblib-launcher is not installed (pip install -e '.[sweeps]')")
def test_joblib_launcher_runs_a_parallel_sweep(cli, tmp_path):
    sweep_dir = tmp_path / "sweep"
    r = cli("-m", *TINY, "calibrator=minmax,mse", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", f"stage_cache_dir={tmp_path / 'stages'}",
            f"hydra.sweep.dir={sweep_dir}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in r.stdout + r.stderr  # the plugin launched the jobs
    records = sorted(sweep_dir.glob("*/record.json"))
    assert len(records) == 2
    recs = [json.loads(p.read_text()) for p in records]
    assert {tuple(sorted(c for c in r["candidates"] if c.startswith("int8."))) for r in recs} == {
        ("int8.minmax",), ("int8.mse",)}
    for rec in recs:  # sweep jobs skip the search and the test sign-off, and say why
        assert "mixed" not in rec["candidates"]
        assert "sweep job" in rec["search"]["skipped"]
        assert "test split is not touched" in rec["signoff"]["skipped"]
        assert rec["recommended"] is None and "sweep job" in rec["recommendation"]["reason"]
        assert "signoff" not in rec["stages"]
        for name, c in rec["candidates"].items():  # every number is dev evidence
            assert c["split"] == "dev", name
        assert rec["candidates"]["fp32"]["metrics"]["accuracy"] > 0.5
    md = (sweep_dir / "sweep.md").read_text()
    assert "int8.minmax" in md and "int8.mse" in md
    assert "Next: run the best job's setting once" in md
    assert (sweep_dir / "sweep.html").is_file()


@pytest.mark.parametrize("name, plugin, expect", [
    ("slurm_gpu", "hydra_plugins.hydra_submitit_launcher", "SlurmLauncher"),
    ("ray_cluster", "hydra_plugins.hydra_ray_launcher", "RayLauncher"),
])
def test_cluster_launcher_examples(name, plugin, expect, tmp_path):
    path = CONF / "hydra" / "launcher" / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("# @package hydra.launcher") and "python -m quantkit -m" in text
    if importlib.util.find_spec(plugin) is None:
        pytest.skip(f"{plugin.split('.')[-1]} is not installed: the example is checked for its "
                    "header only (pip install hydra-submitit-launcher / hydra-ray-launcher)")
    r = subprocess.run([sys.executable, "-m", "quantkit", f"hydra/launcher={name}",
                        "experiment=bert_int8", "--cfg", "hydra", "-p", "hydra.launcher"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout
