"""Shared test helpers: paths, a CLI runner, and a per-session quantkit cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run ``python -m quantkit`` for real, in a subprocess."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, env: dict | None = None, timeout: int = 1800):
        return run_cli(*args, cwd=tmp_path, env=env, timeout=timeout)
    return _run
