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
        "progress=false", "ptq.recipe=generic",  # the launchers are under test, not ptq.recipe=auto
        "bench.enabled=false")  # nor the latency stage (tests/test_e2e.py times every candidate)


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


SUBMITIT, RAY = "hydra_plugins.hydra_submitit_launcher", "hydra_plugins.hydra_ray_launcher"


@pytest.mark.parametrize("name, plugin, expect", [
    ("slurm", SUBMITIT, "SlurmLauncher"),
    ("slurm_local", SUBMITIT, "LocalLauncher"),
    ("slurm_gpu", SUBMITIT, "SlurmLauncher"),
    ("ray_cluster", RAY, "RayLauncher"),
    ("ray_gpu", RAY, "RayLauncher"),
])
def test_cluster_launcher_examples(name, plugin, expect, tmp_path):
    path = CONF / "hydra" / "launcher" / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("# @package hydra.launcher") and "python -m quantkit -m" in text
    if importlib.util.find_spec(plugin) is None:
        pytest.skip(f"{plugin.split('.')[-1]} is not installed: the example is checked for its "
                    "header only (pip install -e '.[sweeps]')")
    r = subprocess.run([sys.executable, "-m", "quantkit", f"hydra/launcher={name}",
                        "experiment=bert_int8", "--cfg", "hydra", "-p", "hydra.launcher"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout


def _launcher_yaml(name: str) -> dict:
    import yaml

    return yaml.safe_load((CONF / "hydra" / "launcher" / f"{name}.yaml").read_text())


def test_slurm_config_differs_from_the_tested_local_one_only_in_the_launcher():
    """README "Sweeps on a cluster": what runs through submitit_local here runs on SLURM by
    changing hydra/launcher=slurm_local to hydra/launcher=slurm (and naming a partition)."""
    slurm, local = _launcher_yaml("slurm"), _launcher_yaml("slurm_local")
    assert (slurm.pop("defaults"), local.pop("defaults")) == (["submitit_slurm"], ["submitit_local"])
    assert slurm == local and slurm


def _composed_launcher(name: str, tmp_path) -> dict:
    import yaml

    r = subprocess.run([sys.executable, "-m", "quantkit", f"hydra/launcher={name}",
                        "--cfg", "hydra", "-p", "hydra.launcher"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return yaml.safe_load(r.stdout)


def test_composed_slurm_and_local_launchers_share_every_common_setting(tmp_path):
    if importlib.util.find_spec(SUBMITIT) is None:
        pytest.skip("hydra-submitit-launcher is not installed (pip install -e '.[sweeps]')")
    slurm, local = _composed_launcher("slurm", tmp_path), _composed_launcher("slurm_local", tmp_path)
    common = set(slurm) & set(local) - {"_target_"}
    assert {"timeout_min", "cpus_per_task", "mem_gb", "submitit_folder"} <= common
    assert {k: slurm[k] for k in common} == {k: local[k] for k in common}
