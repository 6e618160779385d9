"""A sweep through real Ray and real submitit on this machine, and a lost worker.

On the tests' tiny world (tests/reliability/tinyworld.py), a 4-job calibrator sweep
(minmax, percentile, entropy, mse) runs:

1. alone: each job as a one-job sweep with the basic launcher, on a fresh stage cache of its
   own (the reference records);
2. ray: through ``hydra/launcher=ray_cluster`` against a local Ray cluster that this script
   starts (``ray start --head --node-ip-address 127.0.0.1 --num-cpus 2 --include-dashboard
   false``, its temp dir under this run's folder) and stops (``ray stop``) itself;
3. submitit: through ``hydra/launcher=slurm_local`` (submitit's local executor: the code
   path of ``hydra/launcher=slurm``);
4. fault: the submitit sweep again on a fresh cache; one job's worker process is SIGKILLed
   mid-run (the sweep command fails), then the same command runs again.

Checks: every job exits 0 (the sweep command's exit code, one record per job), ran in a
process other than the sweep's own (the launcher dispatched it), and names its launcher;
each job's record equals the same job run alone (times, hosts and paths aside:
tests/test_e2e.py's ``comparable``, less the stage cache dir); the stage cache's log
(``log.jsonl``) shows every entry stored once, the stages the jobs share included; every
cache entry verifies (``StageCache.problems``, which reads every entry). After the fault,
the rerun completes every job, the jobs that had finished compute nothing (all stages from
the cache), and the sweep report names the killed job as ran again.

    pip install -e '.[sweeps]'
    python benchmarks/cluster_sweep.py                      # ray, submitit and the fault
    python benchmarks/cluster_sweep.py --only ray           # one of: ray, submitit, fault
    python benchmarks/cluster_sweep.py --smoke              # --only submitit

``--smoke`` (CI's smoke test): ``--only submitit``; without hydra-submitit-launcher it prints
one line, ``skipped: ...``, and exits 0 (as tests/test_cluster_sweep.py skips).

Last line: ``ray=<ok|FAIL|skipped|not_run> submitit=<...> fault=<...> jobs=<n> seconds=<s>``
(exit 0 when nothing failed). ``skipped``: that launcher's plugin is not installed;
``not_run``: left out by ``--only``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
import tinyworld  # noqa: E402
from test_e2e import comparable  # noqa: E402  (one rule for "the same record")

CALIBRATORS = ("minmax", "percentile", "entropy", "mse")
PLUGINS = {"ray": "hydra_plugins.hydra_ray_launcher", "submitit": "hydra_plugins.hydra_submitit_launcher"}
LAUNCHERS = {"ray": ("ray_cluster", "RayLauncher"), "submitit": ("slurm_local", "LocalLauncher"),
             "alone": (None, "BasicLauncher")}


def say(msg: str) -> None:
    print(msg, flush=True)


def strip(record: dict) -> dict:
    """The record less times, paths, host and job facts, and the stage cache dir, which the
    scenarios vary on purpose."""
    r = comparable(record)
    r.pop("host", None)
    r.get("config", {}).pop("stage_cache_dir", None)
    return r


def world_args(world: dict) -> list[str]:
    drop = ("hydra.run.dir=", "stage_cache_dir=")
    return [a for a in tinyworld.cli_args(world) if not a.startswith(drop)]


def sweep_cmd(args: list[str], out: Path, launcher: str | None, calibrators=CALIBRATORS) -> list[str]:
    cmd = [sys.executable, "-m", "quantkit", "-m", *args, f"calibrator={','.join(calibrators)}",
           f"stage_cache_dir={out / 'stages'}", f"hydra.sweep.dir={out / 'sweep'}",
           "hydra.sweep.subdir=job${hydra.job.num}"]
    return cmd + ([f"hydra/launcher={launcher}"] if launcher else [])


def start(cmd: list[str], log: Path, env: dict) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        return subprocess.Popen(cmd, cwd=log.parent, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)


def run(cmd: list[str], log: Path, env: dict, timeout: float = 900) -> tuple[int, int]:
    """(exit code, pid) of ``cmd`` run to the end; output in ``log``."""
    proc = start(cmd, log, env)
    try:
        return proc.wait(timeout=timeout), proc.pid
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(), proc.pid


def records(sweep: Path) -> dict[str, dict]:
    """calibrator -> record of every job below ``sweep`` (one calibrator per job)."""
    out = {}
    for p in sorted(sweep.glob("*/record.json")):
        rec = json.loads(p.read_text())
        (method,) = rec["config"]["calibrator"]["methods"]
        out[method] = rec
    return out


def cache_checks(stages: Path) -> list[str]:
    """What is wrong with a shared stage cache: an entry stored twice, an entry that fails
    verification or a half-written directory (StageCache.problems reads every entry)."""
    from quantkit.cache import StageCache

    cache = StageCache(stages)
    stored = Counter((e["stage"], e["key"]) for e in cache.events() if e["event"] == "stored")
    twice = [f"stored {n} times: {s} {k[:12]}" for (s, k), n in stored.items() if n > 1]
    return twice + cache.problems()


def check_sweep(name: str, out: Path, rc: int, driver_pid: int, ref: dict[str, dict],
                launcher: str) -> bool:
    """Say and return whether a finished sweep passes every check of the module docstring."""
    recs = records(out / "sweep")
    same = {c: c in recs and strip(recs[c]) == strip(ref[c]) for c in CALIBRATORS}
    jobs = {c: recs[c].get("job", {}) for c in recs}
    dispatched = all(j.get("pid") not in (None, driver_pid) for j in jobs.values())
    named = all(j.get("launcher") == launcher for j in jobs.values())
    problems = cache_checks(out / "stages")
    shared = shared_stages(recs, out / "stages")
    hosts = sorted({j.get("worker_host") for j in jobs.values()})
    ok = rc == 0 and len(recs) == len(CALIBRATORS) and all(same.values()) and dispatched \
        and named and not problems and (out / "sweep" / "sweep.md").is_file()
    say(f"{name}: rc={rc} jobs={len(recs)} identical_to_alone={same} launcher={launcher} "
        f"named={named} in_worker_processes={dispatched} worker_hosts={hosts} "
        f"shared stages (stored once, hits by other jobs)={shared} "
        f"cache_problems={problems or 'none'}")
    for c in CALIBRATORS:
        if c in recs and not same[c]:
            _say_diff(strip(ref[c]), strip(recs[c]), f"{c}.record")
    return ok


def shared_stages(recs: dict[str, dict], stages: Path) -> dict[str, str]:
    """Stage -> "<entries stored>x stored, <hits> hits" for the stages some job read from the
    cache (computed by another job): the sharing the cache gave this sweep. That no key
    was stored twice is checked by :func:`cache_checks`."""
    from quantkit.cache import StageCache

    stored = Counter(e["stage"] for e in StageCache(stages).events() if e["event"] == "stored")
    hits = Counter()
    for r in recs.values():
        for stage, c in r.get("stage_cache", {}).items():
            hits[stage] += c["hits"]
    return {s: f"{stored[s]}x stored, {hits[s]} hits" for s in sorted(hits) if hits[s]}


def _say_diff(a, b, path: str, limit: list | None = None) -> None:
    limit = [0] if limit is None else limit
    if limit[0] >= 10:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            _say_diff(a.get(k), b.get(k), f"{path}.{k}", limit)
    elif a != b:
        limit[0] += 1
        say(f"  differs at {path}: {str(a)[:120]} != {str(b)[:120]}")


# ---------------------------------------------------------------------------------------
# Ray: a local cluster this script starts and stops

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_start(temp_dir: Path, env: dict, log: Path) -> str:
    """Start a head node; return its address (as the node wrote it to its temp dir)."""
    cmd = ["ray", "start", "--head", "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
           "--include-dashboard", "false", "--port", str(free_port()),
           "--temp-dir", str(temp_dir), "--disable-usage-stats"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    log.write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"ray start failed (rc={r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    current = temp_dir / "ray_current_cluster"
    if current.is_file():
        return current.read_text().strip()
    m = re.search(r"ray start --address='([^']+)'", r.stdout + r.stderr)
    if not m:
        raise RuntimeError(f"ray start printed no address:\n{(r.stdout + r.stderr)[-3000:]}")
    return m.group(1)


def ray_stop(env: dict, log: Path) -> None:
    r = subprocess.run(["ray", "stop"], env=env, capture_output=True, text=True, timeout=300)
    log.write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        say(f"ray stop exited {r.returncode}: {(r.stdout + r.stderr)[-500:]}")


def ray_sweep(args, base: Path, env: dict, ref: dict) -> bool:
    out = base / "ray"
    out.mkdir()
    # Ray's socket paths must stay under 107 bytes: a short temp dir of its own in /tmp
    temp_dir = Path(tempfile.mkdtemp(prefix="qkray-"))
    try:
        address = ray_start(temp_dir, env, out / "ray_start.log")
        say(f"ray: local cluster at {address} (temp dir {temp_dir})")
        t0 = time.perf_counter()
        rc, pid = run(sweep_cmd(args, out, LAUNCHERS["ray"][0]), out / "sweep.log",
                      {**env, "RAY_ADDRESS": address})
        say(f"ray: sweep took {time.perf_counter() - t0:.1f} s")
    finally:
        ray_stop(env, out / "ray_stop.log")
        shutil.rmtree(temp_dir, ignore_errors=True)
    ok = check_sweep("ray", out, rc, pid, ref, LAUNCHERS["ray"][1])
    if rc != 0:
        say((out / "sweep.log").read_text(errors="replace")[-3000:])
    return ok


def submitit_sweep(args, base: Path, env: dict, ref: dict) -> bool:
    out = base / "submitit"
    t0 = time.perf_counter()
    rc, pid = run(sweep_cmd(args, out, LAUNCHERS["submitit"][0]), out / "sweep.log", env)
    say(f"submitit: sweep took {time.perf_counter() - t0:.1f} s")
    ok = check_sweep("submitit", out, rc, pid, ref, LAUNCHERS["submitit"][1])
    if rc != 0:
        say((out / "sweep.log").read_text(errors="replace")[-3000:])
    return ok


# ---------------------------------------------------------------------------------------
# a lost worker: SIGKILL one submitit job mid-run, then the same command again

_STARTED = re.compile(r"\bstage data \.\.\.")
_DONE = re.compile(r"record written to")


def _job_logs(sweep: Path) -> dict[int, str]:
    """pid -> the text of that submitit job's logs (the local executor's job id is its pid)."""
    logs = {}
    for d in (sweep / ".submitit").glob("[0-9]*"):
        if not d.is_dir() or not d.name.isdigit():
            continue
        text = "".join(p.read_text(errors="replace") for p in d.glob("*_log.*"))
        logs[int(d.name)] = text
    return logs


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def kill_one_job(sweep: Path, proc: subprocess.Popen, timeout_s: float = 600) -> int | None:
    """SIGKILL the worker of the first job seen running its stages; its pid, or None.

    The local executor's job id is the pid of a controller whose child (a task process,
    ``submitit.core._submit``) runs the job: that child is the worker killed here; the
    controller then reports the job failed, as SLURM reports a lost node's job."""
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < timeout_s:
        for controller, text in sorted(_job_logs(sweep).items()):
            if _STARTED.search(text) and not _DONE.search(text):
                for pid in _children(controller):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        continue
                    return pid
        time.sleep(0.02)
    return None


def fault(args, base: Path, env: dict, ref: dict) -> bool:
    out = base / "fault"
    cmd = sweep_cmd(args, out, LAUNCHERS["submitit"][0])
    proc = start(cmd, out / "first.log", env)
    killed = kill_one_job(out / "sweep", proc)
    rc1 = proc.wait(timeout=900)
    finished = sorted(records(out / "sweep"))
    killed_label = next((d.name for d in (out / "sweep").glob("job*")
                         if (d / ".hydra").is_dir() and not (d / "record.json").is_file()), None)
    after_kill = cache_checks(out / "stages")
    not_verified = [p for p in after_kill if not p.startswith("left over:")]
    say(f"fault: killed worker pid {killed} ({killed_label}); the sweep exited {rc1}; "
        f"finished before the kill: {finished}; entries failing verification right after the "
        f"kill: {not_verified or 'none'}; half-written dirs left: "
        f"{[p for p in after_kill if p.startswith('left over:')] or 'none'}")
    t0 = time.perf_counter()
    rc2, pid = run(cmd, out / "rerun.log", env)
    say(f"fault: rerun took {time.perf_counter() - t0:.1f} s")
    ok = check_sweep("fault rerun", out, rc2, pid, ref, LAUNCHERS["submitit"][1])
    recs = records(out / "sweep")
    ran_again = sorted(c for c, r in recs.items() if not r.get("job", {}).get("earlier_finished"))
    from_cache = {c: sum(s["misses"] for s in r.get("stage_cache", {}).values())
                  for c, r in recs.items() if r.get("job", {}).get("earlier_finished")}
    md = (out / "sweep" / "sweep.md").read_text() if (out / "sweep" / "sweep.md").is_file() else ""
    named = killed_label is not None and f"Ran again after a lost attempt: {killed_label}." in md
    ok = ok and killed is not None and rc1 != 0 and not not_verified and named \
        and ran_again == [c for c in CALIBRATORS if c not in finished] \
        and all(n == 0 for n in from_cache.values())
    say(f"fault: ran again={ran_again}; stages computed by the jobs that had finished: "
        f"{from_cache}; sweep report names the killed job: {named}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("ray", "submitit", "fault"), default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="an empty dir for everything but Ray's temp dir (kept; default: a "
                         "temp dir, removed at the end unless --keep)")
    _common.bench_args(ap, "--only submitit (the alone runs and one submitit sweep of the tiny "
                           "world); skipped without hydra-submitit-launcher")
    a = ap.parse_args(argv)
    if a.smoke:
        if importlib.util.find_spec(PLUGINS["submitit"]) is None:
            return _common.skip("hydra-submitit-launcher not installed (pip install -e "
                                "'.[sweeps]'): the cluster sweep's smoke mode needs it")
        a.only = a.only or "submitit"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below
    parts = [a.only] if a.only else ["ray", "submitit", "fault"]
    base = a.work_dir or Path(tempfile.mkdtemp(prefix="quantkit-cluster-"))
    base.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("RAY_ADDRESS", None)  # never join a cluster this script did not start
    say(f"cluster sweep: tiny world in {base}; {len(CALIBRATORS)} jobs: {', '.join(CALIBRATORS)}")
    t_start = time.perf_counter()
    result = {}
    try:
        args = world_args(tinyworld.make_world(base / "world"))
        ref = {}
        for c in CALIBRATORS:
            out = base / "alone" / c
            rc, _ = run(sweep_cmd(args, out, None, calibrators=(c,)), out / "sweep.log", env)
            rec = records(out / "sweep").get(c)
            if rc != 0 or rec is None:
                say((out / "sweep.log").read_text(errors="replace")[-3000:])
                raise SystemExit(f"the job {c} run alone failed (rc={rc})")
            ref[c] = rec
        say(f"alone: {len(ref)} jobs, {time.perf_counter() - t_start:.1f} s")
        steps = {"ray": ray_sweep, "submitit": submitit_sweep, "fault": fault}
        for part in parts:
            plugin = PLUGINS["ray" if part == "ray" else "submitit"]
            if importlib.util.find_spec(plugin) is None:
                say(f"{part}: skipped, {plugin.split('.')[-1]} is not installed "
                    "(pip install -e '.[sweeps]')")
                result[part] = "skipped"
                continue
            result[part] = "ok" if steps[part](args, base, env, ref) else "FAIL"
    finally:
        if not a.keep and a.work_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    say(" ".join(f"{p}={result.get(p, 'not_run')}" for p in ("ray", "submitit", "fault"))
        + f" jobs={len(CALIBRATORS)} seconds={time.perf_counter() - t_start:.0f}")
    return 1 if "FAIL" in result.values() else 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("cluster_sweep", main))
