"""Fault injection on a small real experiment: kill-and-resume, two concurrent runs, bad inputs.

1. Reference: one uninterrupted run on a fresh stage cache.
2. Kill and resume: for each kill point (a stage name), start the run on a fresh stage cache,
   SIGKILL its process group once the log says that stage started (plus a short delay), then
   start the same command again in the same run dir. The group is frozen (SIGSTOP) before the
   kill and its log read: a kill that landed past the stage (a fast host) is tried again on a
   fresh cache with no delay, up to three times, and counts as a failure if it never lands. The
   resumed record must equal the reference (apart from times and paths: tests/test_e2e.py's
   ``comparable``), the resumed run must reuse the stages finished before the kill, and the
   cache must hold only verified entries.
3. Concurrent: two runs started at once on one fresh stage cache: both exit 0, their
   records equal the reference, every cache entry verifies and each key was computed once.
4. Bad inputs: the catalog in tests/reliability/test_bad_inputs.py (pytest, in a subprocess).

    python benchmarks/faults.py                     # bert_int8, eval 200 (about 15 minutes)
    python benchmarks/faults.py --tiny              # the tests' tiny world (about 1 minute)
    python benchmarks/faults.py --smoke             # --tiny --skip-catalog --kill-at evaluate

The runs execute a snapshot of quantkit/ and conf/ taken at start (the working tree may be
edited while a long benchmark runs); the catalog runs against the working tree.

Last line: ``resume_identical=<true|false> concurrent_ok=<true|false> bad_inputs=<pass>/<total>``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
from test_e2e import comparable  # noqa: E402  (one rule for "the same record")

BERT_ARGS = ["experiment=bert_int8", "data.eval.limit=200", "data.calib.num_samples=64",
             "precision.search.enabled=false", "compare.subset=32", "verdict.n_boot=300",
             "compare.backend_check_subset=64", "bench.enabled=false", "progress=false"]
BERT_KILLS = ("fp32_reference", "calibration", "evaluate", "layerwise")
TINY_KILLS = ("calibration", "evaluate")


def same_record(a: dict | None, b: dict | None) -> bool:
    """Equal records apart from times and paths, and from the stage cache dir, which these
    scenarios vary on purpose."""
    if a is None or b is None:
        return False

    def strip(r: dict) -> dict:
        r = comparable(r)
        r.get("config", {}).pop("stage_cache_dir", None)
        return r
    return strip(a) == strip(b)


def say(msg: str) -> None:
    print(msg, flush=True)


_RUNNING: list[subprocess.Popen] = []  # killed on exit, so no run outlives the script
# A snapshot of quantkit/ and conf/ taken at start: every run of one invocation executes the
# same code and composes the same config, even while the working tree is being edited.
_SRC: Path | None = None


def start(args: list[str], run_dir: Path, stages: Path) -> tuple[subprocess.Popen, Path]:
    """Start ``python -m quantkit`` in its own process group; output goes to a file."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    out = run_dir.parent / f"{run_dir.name}.{time.monotonic_ns()}.out"
    # unbuffered: Hydra logs to stdout, which a file makes block-buffered; the kill waits for
    # "stage <name> ..." in this file, and a buffered marker could show only after the run
    # had written record.json (a kill that then lands after the end: a flaky "not resumed")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cwd = ROOT
    if _SRC is not None:  # `python -m` puts the cwd first on sys.path: run from the snapshot
        env["PYTHONPATH"] = os.pathsep.join([str(_SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cwd = _SRC
    cmd = [sys.executable, "-m", "quantkit", *args, f"hydra.run.dir={run_dir}",
           f"stage_cache_dir={stages}"]
    with open(out, "w") as f:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    _RUNNING.append(proc)
    return proc, out


def finish(proc: subprocess.Popen, out: Path, timeout: float = 3600) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    return rc, out.read_text(errors="replace")


def record_of(run_dir: Path) -> dict | None:
    p = run_dir / "record.json"
    return json.loads(p.read_text()) if p.is_file() else None


def cache_problems(stages: Path) -> list[str]:
    """Entries that fail verification and staging dirs left behind."""
    from quantkit.cache import MANIFEST, StageCache

    cache, problems = StageCache(stages), []
    for p in sorted(stages.rglob("*")):
        rel = p.relative_to(stages)
        if rel.parts[0] == "locks":
            continue
        if p.name.startswith(".tmp"):
            problems.append(f"staging left: {rel}")
        elif p.is_dir() and len(rel.parts) == 3:
            if not (p / MANIFEST).is_file() or cache.get(rel.parts[0], rel.parts[2]) is None:
                problems.append(f"entry fails verification: {rel}")
    return problems


def run_once(args: list[str], run_dir: Path, stages: Path) -> tuple[int, str, dict | None]:
    proc, out = start(args, run_dir, stages)
    rc, log = finish(proc, out)
    return rc, log, record_of(run_dir)


_STAGE_LINE = re.compile(r"\bstage (\w+) (\.\.\.|done in)")


def stage_at(log: str) -> str | None:
    """The stage a run was inside when its log ended: started and not done; None between stages."""
    inside = None
    for name, what in _STAGE_LINE.findall(log):
        inside = name if what == "..." else (None if name == inside else inside)
    return inside


def kill_during(args: list[str], run_dir: Path, stages: Path, stage: str, delay_s: float,
                timeout_s: float = 1800) -> tuple[str, str | None]:
    """Run until the log says ``stage <stage> ...``, wait ``delay_s``, freeze the group
    (SIGSTOP), read where the run is, then SIGKILL it. Returns (what happened, the stage the
    kill landed inside, or None when it landed between stages or after the end)."""
    proc, out = start(args, run_dir, stages)
    marker = re.compile(rf"\bstage {re.escape(stage)} \.\.\.")
    t0 = time.monotonic()
    seen = False
    while proc.poll() is None and time.monotonic() - t0 < timeout_s:
        if marker.search(out.read_text(errors="replace")):
            seen = True
            time.sleep(delay_s)
            break
        time.sleep(0.01)
    if proc.poll() is not None:
        return f"finished before the kill (rc={proc.returncode}, stage seen={seen})", None
    os.killpg(proc.pid, signal.SIGSTOP)  # frozen: the log read next is where the kill lands
    landed = stage_at(out.read_text(errors="replace"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if not seen:
        return "killed (stage not seen)", landed
    return f"killed {delay_s:.2f} s after stage {stage} started, inside stage {landed}", landed


def kill_and_resume(args, base: Path, stage: str, ref: dict, delay_s: float,
                    attempts: int = 3) -> bool:
    """Kill inside ``stage`` (a fresh run dir and cache per attempt; the next attempt kills
    sooner when one lands past the stage, as on a fast host), resume, compare."""
    for attempt in range(1, attempts + 1):
        root = base / f"kill-{stage}" / f"attempt{attempt}"
        run_dir, stages = root / "run", root / "stages"
        how, landed = kill_during(args, run_dir, stages, stage, delay_s)
        partial = record_of(run_dir)
        if partial is None and landed == stage:
            break
        say(f"kill at {stage}, attempt {attempt}: {how}"
            + (" (record.json already written)" if partial is not None else "")
            + "; not inside the stage, trying again sooner")
        delay_s = 0.0
    rc, log, rec = run_once(args, run_dir, stages)
    hits = {s: c["hits"] for s, c in (rec or {}).get("stage_cache", {}).items() if c["hits"]}
    same = same_record(rec, ref)
    problems = cache_problems(stages)
    temps = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*.tmp*")]
    inside = partial is None and landed == stage
    ok = rc == 0 and same and not problems and not temps and inside
    say(f"kill at {stage}: {how}; resumed rc={rc}, record identical={same}, "
        f"reused {hits or 'nothing'}, cache problems={problems or 'none'}, "
        f"temp files={temps or 'none'}")
    if rc != 0:
        say(log[-3000:])
    if rec is not None and not same:
        _say_diff(comparable(ref), comparable(rec))
    return ok


def concurrent(args, base: Path, ref: dict) -> bool:
    stages = base / "concurrent" / "stages"
    procs = [start(args, base / "concurrent" / f"run{i}", stages) for i in (1, 2)]
    results = [finish(p, o) for p, o in procs]
    recs = [record_of(base / "concurrent" / f"run{i}") for i in (1, 2)]
    rcs = [rc for rc, _ in results]
    same = all(same_record(r, ref) for r in recs)
    problems = cache_problems(stages)
    misses = [sum(c["misses"] for c in (r or {}).get("stage_cache", {}).values()) for r in recs]
    hits = [sum(c["hits"] for c in (r or {}).get("stage_cache", {}).values()) for r in recs]
    computed = {}
    for p in stages.glob("*/*/*/entry.json"):
        computed[p.parent.parent.parent.name] = computed.get(p.parent.parent.parent.name, 0) + 1
    ok = rcs == [0, 0] and same and not problems
    say(f"concurrent: rc={rcs}, records identical to the reference={same}, misses={misses}, "
        f"hits={hits}, cache entries={computed}, cache problems={problems or 'none'}")
    for rc, log in results:
        if rc != 0:
            say(log[-3000:])
    return ok


def _say_diff(a, b, path: str = "record", limit: list | None = None) -> None:
    limit = limit if limit is not None else [8]
    if limit[0] <= 0:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                _say_diff(a.get(k), b.get(k), f"{path}.{k}", limit)
    elif a != b:
        limit[0] -= 1
        say(f"  differs: {path}: {str(a)[:120]} != {str(b)[:120]}")


def bad_inputs() -> tuple[int, int]:
    """(passed, total) of the bad-input catalog, run by pytest in a subprocess."""
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "reliability" / "test_bad_inputs.py"),
                        "-k", "test_bad_input_fails_cleanly"],
                       cwd=ROOT, capture_output=True, text=True)
    tail = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error)", tail)}
    passed = counts.get("passed", 0)
    say(f"bad inputs: {tail}")
    return passed, passed + counts.get("failed", 0) + counts.get("error", 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny world instead of bert_int8")
    ap.add_argument("--kill-at", default=None, help="comma-separated stage names")
    ap.add_argument("--delay", type=float, default=None, help="seconds into the stage to kill")
    ap.add_argument("--skip-catalog", action="store_true", help="do not run the bad-input catalog")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    _common.bench_args(ap, "--tiny --skip-catalog --kill-at evaluate (one kill, the concurrent "
                           "pair)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.tiny, a.skip_catalog, a.kill_at = True, True, a.kill_at or "evaluate"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below

    base = Path(tempfile.mkdtemp(prefix="quantkit-faults-"))
    global _SRC
    _SRC = base / "src"
    for sub in ("quantkit", "conf"):
        shutil.copytree(ROOT / sub, _SRC / sub, ignore=shutil.ignore_patterns("__pycache__"))
    if a.tiny:
        import tinyworld

        world = tinyworld.make_world(base / "world")
        drop = ("hydra.run.dir=", "stage_cache_dir=")
        args = [x for x in tinyworld.cli_args(world) if not x.startswith(drop)]
        kills, delay = TINY_KILLS, 0.02 if a.delay is None else a.delay
    else:
        args, kills, delay = BERT_ARGS, BERT_KILLS, 2.0 if a.delay is None else a.delay
    if a.kill_at:
        kills = tuple(k for k in a.kill_at.split(",") if k)
    say(f"faults: {'tiny world' if a.tiny else 'bert_int8'} in {base}; kill points {list(kills)}")
    try:
        t0 = time.perf_counter()
        rc, log, ref = run_once(args, base / "reference" / "run", base / "reference" / "stages")
        if rc != 0 or ref is None:
            say(log[-3000:])
            raise SystemExit("the reference run failed")
        say(f"reference run: {time.perf_counter() - t0:.0f} s")
        resume_ok = all([kill_and_resume(args, base, k, ref, delay) for k in kills])
        concurrent_ok = concurrent(args, base, ref)
        passed, total = (0, 0) if a.skip_catalog else bad_inputs()
    finally:
        for proc in _RUNNING:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    say(f"resume_identical={str(resume_ok).lower()} concurrent_ok={str(concurrent_ok).lower()} "
        f"bad_inputs={passed}/{total}")
    return 0 if resume_ok and concurrent_ok and passed == total else 1


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("faults", main))
