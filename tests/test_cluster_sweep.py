"""Sweeps through real Ray and real submitit, and a lost worker: benchmarks/cluster_sweep.py.

Marked ``cluster`` (not in the default run: about 3 minutes on 2 cores, and the plugins come
with ``pip install -e '.[sweeps]'`` only). Run it with ``python -m pytest -m cluster``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_ABSENT = [name for name, mod in (("hydra-ray-launcher", "hydra_plugins.hydra_ray_launcher"),
                                  ("hydra-submitit-launcher", "hydra_plugins.hydra_submitit_launcher"))
           if importlib.util.find_spec(mod) is None]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.skipif(bool(_ABSENT), reason=f"{', '.join(_ABSENT)} not installed (pip install -e '.[sweeps]')")
def test_sweep_through_ray_and_submitit_then_a_lost_worker(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cluster_sweep.py"),
                        "--work-dir", str(tmp_path / "work"),
                        "--results-dir", str(tmp_path)],  # never into benchmarks/results/
                       capture_output=True, text=True, timeout=1500)
    lines = r.stdout.strip().splitlines()
    assert lines, r.stderr[-3000:]
    assert lines[-1].startswith("ray=ok submitit=ok fault=ok jobs=4 "), r.stdout[-6000:] + r.stderr[-3000:]
    assert r.returncode == 0
    fault = next(ln for ln in lines if ln.startswith("fault: ran again="))
    assert "ran again=[]" not in fault and "sweep report names the killed job: True" in fault
    for name in ("ray", "submitit"):
        checks = next(ln for ln in lines if ln.startswith(f"{name}: rc="))
        assert "rc=0 jobs=4" in checks and "False" not in checks.split(" shared stages")[0]
