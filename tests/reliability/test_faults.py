"""Interruption and concurrency on the tiny world, through benchmarks/faults.py (slow).

A run SIGKILLed inside a stage and started again in the same run dir resumes from the stage
cache and writes a record identical to an uninterrupted run; two runs started at once on one
stage cache both finish with identical records and an intact, hash-verified cache.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kill_resume_and_concurrent_runs_on_the_tiny_world(tmp_path):
    # its results file to tmp_path: a test never rewrites benchmarks/results/
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "faults.py"), "--tiny",
                        "--skip-catalog", "--kill-at", "evaluate", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-3000:]
    assert lines[-1] == "resume_identical=true concurrent_ok=true bad_inputs=0/0", r.stdout[-4000:]
    assert r.returncode == 0
    killed = next(ln for ln in lines if ln.startswith("kill at evaluate:"))
    assert "inside stage evaluate;" in killed  # read from the frozen run's log
    assert "reused {" in killed  # it resumed from the stages finished before the kill
