"""record.job (quantkit/run/job.py): launcher, worker host and attempt of a run."""

from __future__ import annotations

import json
import os
import socket

from quantkit.run.job import ATTEMPTS_NAME, job_facts, launcher_name


def test_launcher_name_is_the_class_name():
    assert launcher_name("hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher") == "RayLauncher"
    assert launcher_name(None) is None


def test_outside_hydra_nothing_is_written_and_the_attempt_is_unknown(tmp_path):
    facts = job_facts(tmp_path)
    assert facts == {"launcher": None, "worker_host": socket.gethostname(), "pid": os.getpid(),
                     "attempt": None, "earlier_finished": False}
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "record.json").write_text("{}")
    assert job_facts(tmp_path)["earlier_finished"] is True


def test_attempts_are_counted_in_hydras_output_subdir(tmp_path, cli):
    # the real CLI, as a one-job sweep run twice in the same dir (tiny world: seconds)
    import tinyworld

    world = tinyworld.make_world(tmp_path / "w")
    args = [a for a in tinyworld.cli_args(world, "calibrator=minmax") if not a.startswith("hydra.run")]
    sweep = tmp_path / "sweep"
    facts = []
    for _ in range(2):
        r = cli("-m", *args, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=job")
        assert r.returncode == 0, r.stderr[-3000:]
        facts.append(json.loads((sweep / "job" / "record.json").read_text())["job"])
    assert [(f["launcher"], f["attempt"], f["earlier_finished"]) for f in facts] == [
        ("BasicLauncher", 1, False), ("BasicLauncher", 2, True)]
    lines = (sweep / "job" / ".hydra" / ATTEMPTS_NAME).read_text().splitlines()
    assert [json.loads(ln)["pid"] for ln in lines] == [f["pid"] for f in facts]
    md = (sweep / "sweep.md").read_text()
    assert "Rerun after finishing before" in md and "| BasicLauncher |" in md
