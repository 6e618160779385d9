"""Sweep cost: a 4-job calibrator sweep vs one run that computes all four calibrators.

Both start from an empty stage cache of their own (the prepared model is reused by both), so
the ratio shows what the stage cache saves a sweep: the jobs share the FP32 reference, the
calibration statistics (one pass serves every calibrator), the FP16 candidate and its
evaluation. Real CLI runs in subprocesses. Usage:

    python benchmarks/sweep.py [--eval-limit N]
    python benchmarks/sweep.py --smoke      # the same on the tests' tiny world

Last line: sweep_seconds=<s> single_seconds=<s> sweep_vs_single=<ratio>
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def timed(args: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=cwd, capture_output=True,
                       text=True, env=dict(os.environ))
    if r.returncode != 0:
        raise RuntimeError(f"quantkit {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval-limit", type=int, default=None)
    _common.bench_args(ap, "the same two commands on the tests' tiny world")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if a.smoke:  # its own cache and ledger under tmp; the two commands' stage caches below
            common = [o for o in _common.tiny_overrides(tmp / "world")
                      if not o.startswith("stage_cache_dir=")]
        else:
            _common.setup("bert_int8")  # prepare / reuse the model outside the measurement
            common = ["experiment=bert_int8", "progress=false"]
        if a.eval_limit:
            common.append(f"data.eval.limit={a.eval_limit}")
        single = timed([*common, f"stage_cache_dir={tmp / 'cache_single'}",
                        f"hydra.run.dir={tmp / 'single'}"], tmp)
        sweep = timed(["-m", *common, "calibrator=minmax,percentile,entropy,mse",
                       f"stage_cache_dir={tmp / 'cache_sweep'}",
                       f"hydra.sweep.dir={tmp / 'sweep'}"], tmp)
        report = (tmp / "sweep" / "sweep.html").exists()
    print(f"single run, calibrator=all (4 calibrators):  {single:7.1f} s")
    print(f"sweep, calibrator=minmax,percentile,entropy,mse (4 jobs): {sweep:7.1f} s; "
          f"comparison report written: {report}")
    print(f"sweep_seconds={sweep:.1f} single_seconds={single:.1f} sweep_vs_single={sweep / single:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("sweep", main))
