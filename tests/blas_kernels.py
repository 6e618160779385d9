"""Run Python in a fresh interpreter under a chosen OpenBLAS kernel (issue 48).

``OPENBLAS_CORETYPE`` is read when numpy loads OpenBLAS, so a kernel can only be chosen for a
new process; the test process's own environment is never changed. Each child prints one JSON
line last: its result and the BLAS kernel numpy used (threadpoolctl).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import quantkit

#: appended to every child: the kernel numpy's BLAS dispatched to
_KERNEL = r"""
from threadpoolctl import threadpool_info as _tpi
_out["kernel"] = [i.get("architecture") for i in _tpi() if i["user_api"] == "blas"]
print(json.dumps(_out))
"""


def run_child(code: str, coretype: str | None) -> dict:
    """Run ``code`` (which fills a dict ``_out`` and imports json) with ``OPENBLAS_CORETYPE``
    set to ``coretype`` (None: removed); its ``_out`` with ``kernel`` added."""
    env = dict(os.environ)
    if coretype is None:
        env.pop("OPENBLAS_CORETYPE", None)
    else:
        env["OPENBLAS_CORETYPE"] = coretype
    here = str(Path(quantkit.__file__).resolve().parents[1])  # this checkout's quantkit
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    r = subprocess.run([sys.executable, "-c", code + _KERNEL], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def same_under_two_kernels(code: str) -> tuple[dict, dict]:
    """``code``'s results under OpenBLAS's Haswell kernel and the default one (Sandybridge, a
    kernel without FMA, where the default already is Haswell); skips where numpy used one
    kernel in every child. Returns the two results for the caller to compare."""
    forced, default = run_child(code, "Haswell"), run_child(code, None)
    if forced["kernel"] == default["kernel"]:
        forced = run_child(code, "Sandybridge")
    if forced["kernel"] == default["kernel"]:
        pytest.skip(f"numpy used one BLAS kernel in every child ({default['kernel']}): not "
                    "OpenBLAS, or OPENBLAS_CORETYPE is ignored on this CPU")
    return forced, default
