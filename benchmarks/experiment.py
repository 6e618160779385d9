"""One shipped experiment as a new user runs it: ``python -m quantkit experiment=<name>`` in a
child process from an empty cache and HOME of its own, with what it printed (the candidates'
table, the recommendation, the stage walls), its wall time and peak RSS. ``--kernels`` runs it
twice more under the two OpenBLAS kernels (``OPENBLAS_CORETYPE`` unset and ``Haswell``), each
cold, and compares the artifacts byte for byte: numbers must not depend on numpy's kernel.

The results file is ``results/<experiment>.md`` (``results/experiment.md`` with ``--smoke``,
which runs the tests' tiny world instead). Last line::

    experiment=<name> rc=<code> wall_s=<s> peak_rss_gb=<gb> recommended=<candidate>
    verdict=<status> artifacts=<n> kernels_identical=<true|false|na>
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

import quantkit

KERNELS = {"default": None, "haswell": "Haswell"}
#: Hydra's console log lines (its default handler writes them to stdout beside the summary)
LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]\[")


def _child(overrides: list[str], root: Path, coretype: str | None, tag: str) -> dict:
    """Run the CLI once, cold: cache, HOME and run dir under ``root``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QUANTKIT_CACHE", "OPENBLAS_CORETYPE")}
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), QUANTKIT_CACHE=str(root / "cache"),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_DATA_HOME=str(home / ".local/share"))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    run_dir = root / "run"
    cmd = [sys.executable, "-m", "quantkit", *overrides, f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    with open(root / "stderr.log", "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, cwd=_common.ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        out = proc.stdout.read()
        proc.stdout.close()
        # wait4: this child's own peak RSS (RUSAGE_CHILDREN would be the maximum over runs)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    arts = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.glob("model.*.onnx"))}
    path = run_dir / "record.json"
    return {"tag": tag, "rc": os.waitstatus_to_exitcode(status), "wall": wall, "stdout": out,
            "artifacts": arts, "record": quantkit.load_record(path) if path.is_file() else None,
            "rss_gb": usage.ru_maxrss / 1024 ** 2, "stderr": root / "stderr.log"}


def _verdict(record) -> str:
    """The recommended candidate's sign-off status ("none" when nothing is recommended)."""
    cand = record.candidate(record.recommended) if record is not None else None
    if cand is None:
        return "none" if record is not None else "na"
    return cand.verdict.status if cand.verdict is not None else "none"


def main() -> int:
    ap = _common.bench_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]),
                            "the tests' tiny world, one cold run")
    ap.add_argument("--experiment", default="bert_int8",
                    help="a shipped experiment (conf/experiment/<name>.yaml)")
    ap.add_argument("--kernels", action="store_true",
                    help="run cold under both OpenBLAS kernels and compare the artifacts")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="where the cold caches and run dirs go (default: a temporary dir)")
    args = ap.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="quantkit-experiment-"))
    if args.smoke:
        name = "tinyworld"
        overrides = _common.tiny_overrides(work / "world", "progress=false")
        overrides = [o for o in overrides if not o.startswith("cache_dir=")]
    else:
        name = args.experiment
        overrides = [f"experiment={name}", "progress=false"]
    kernels = list(KERNELS.items()) if args.kernels else [("as-is", os.environ.get(
        "OPENBLAS_CORETYPE"))]
    print(f"experiment {name}: {len(kernels)} cold run(s) in {work}", flush=True)
    runs = []
    for tag, coretype in kernels:
        r = _child(overrides, work / tag, coretype, tag)
        runs.append(r)
        print(f"\n== run {tag} (OPENBLAS_CORETYPE={coretype or 'unset'}): rc {r['rc']}, "
              f"wall {r['wall']:.0f} s, peak RSS {r['rss_gb']:.2f} GB", flush=True)
        summary = [ln for ln in r["stdout"].splitlines() if not LOG_LINE.match(ln)]
        print("\n".join(summary) or f"(no output; see {r['stderr']})", flush=True)
        if r["rc"] != 0:
            err = r["stderr"].read_text(encoding="utf-8", errors="replace").strip().splitlines()
            print("\n".join(err[-5:]))
    identical = "na"
    if len(runs) == 2 and all(r["rc"] == 0 for r in runs):
        a, b = runs[0]["artifacts"], runs[1]["artifacts"]
        print("\nartifacts across kernels (sha256):")
        for fname in sorted(set(a) | set(b)):
            same = a.get(fname) == b.get(fname)
            print(f"  {fname:40s} {'identical' if same else 'DIFFERS'}  {a.get(fname, '-')[:12]}"
                  f"  {b.get(fname, '-')[:12]}")
        identical = str(bool(a) and a == b).lower()
    first = runs[0]
    rec = first["record"]
    rc = max(r["rc"] for r in runs)
    print(f"experiment={name} rc={rc} wall_s={first['wall']:.0f} "
          f"peak_rss_gb={max(r['rss_gb'] for r in runs):.2f} "
          f"recommended={(rec.recommended or 'none') if rec is not None else 'na'} verdict={_verdict(rec)} "
          f"artifacts={len(first['artifacts'])} kernels_identical={identical}")
    return 0 if rc == 0 and identical != "false" else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    exp = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--experiment"), "bert_int8")
    sys.exit(_common.run_benchmark(exp if "--smoke" not in args else "experiment", main,
                                   script="experiment"))
