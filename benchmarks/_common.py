"""Shared pieces of the benchmarks: settings and a prepared experiment through quantkit's own
API, the ``--smoke`` / ``--results-dir`` arguments every benchmark takes, the results file
every benchmark writes (:func:`run_benchmark`), the tests' tiny world, and the timing helpers.

Every benchmark's entry point is ``sys.exit(_common.run_benchmark("<name>", main))``: it
runs ``main``, echoes and keeps what it printed, and writes ``benchmarks/results/<name>.md``
(a full run) or ``<temp dir or --results-dir>/<name>.md`` (``--smoke``: CI never rewrites
the committed evidence). The file's "Latest run" section is replaced on every write; the
text below its "Earlier results" heading is kept as it is.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import quantkit  # noqa: E402
from quantkit.fsutil import atomic_write_text  # noqa: E402

#: where a full run writes its results file
RESULTS_DIR = ROOT / "benchmarks" / "results"
LATEST = "## Latest run"
EARLIER = "## Earlier results (migrated from the README)"
#: a benchmark that cannot run here in smoke mode prints one line starting with this, last
SKIP_PREFIX = "skipped: "


def settings_for(experiment: str | None = "bert_int8", *overrides: str):
    """The validated Settings of ``experiment`` (None: no experiment, e.g. the tiny world's
    ``model=onnx data=local ...``) with ``overrides``, as ``python -m quantkit`` composes
    them (``quantkit.configure``)."""
    head = [f"experiment={experiment}"] if experiment else []
    return quantkit.configure([*head, "progress=false", *overrides])


def setup(experiment: str | None = "bert_int8", *overrides: str):
    """(settings, model, splits, feeds) exactly as a quantkit run prepares them: the feeds
    are a TextFeeds or an ImageFeeds (quantkit.data.feeds.make_feeds)."""
    from quantkit.assets import cache_root
    from quantkit.data import load_splits
    from quantkit.data.feeds import make_feeds
    from quantkit.models import load_model

    s = settings_for(experiment, *overrides)
    cache = cache_root(s.cache_dir)
    splits = load_splits(s, cache_dir=cache)
    model = load_model(s, splits, cache_dir=cache)
    return s, model, splits, make_feeds(s, model)


# --- the tests' tiny world (tests/reliability/tinyworld.py) ---------------------------------

def tinyworld():
    """The tests' tiny-world module: a tiny real text model, tokenizer and CSV in seconds."""
    for d in (ROOT / "tests", ROOT / "tests" / "reliability"):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    import tinyworld as module

    return module


def tiny_overrides(root: Path, *extra: str) -> list[str]:
    """A tiny world built under ``root`` and the overrides of a quantkit run on it (its cache,
    stage cache and ledger under ``root``; no ``hydra.*`` key: for ``quantkit.configure``
    and ``quantkit.run``). ``extra`` replaces keys of the same name."""
    tw = tinyworld()
    world = tw.make_world(Path(root))
    args = tw.override(tw.cli_args(world), f"verdict.ledger={Path(root) / 'ledger.sqlite'}",
                       *extra)
    return [a for a in args if not a.startswith("hydra.")]


# --- arguments and the results file ----------------------------------------------------------

def bench_args(ap: argparse.ArgumentParser, smoke: str) -> argparse.ArgumentParser:
    """Add the arguments every benchmark takes: ``--smoke`` (``smoke`` says what the smallest
    real run is) and ``--results-dir``."""
    ap.add_argument("--smoke", action="store_true",
                    help=f"the smallest real run, seconds to a minute (CI's smoke test): {smoke}; "
                         "its results file goes to a temporary directory unless --results-dir")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help=f"where the results file <name>.md is written (default: "
                         f"{RESULTS_DIR.relative_to(ROOT)}/ for a full run, a temporary "
                         "directory for --smoke)")
    return ap


def skip(reason: str) -> int:
    """Print the one line a benchmark ends with when it cannot run here (an optional
    environment is missing); returns exit code 0."""
    print(f"{SKIP_PREFIX}{reason}", flush=True)
    return 0


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out):
        self.out, self.kept = out, io.StringIO()

    def write(self, text):
        self.kept.write(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()

    def isatty(self):
        return False

    def fileno(self):
        return self.out.fileno()


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def run_facts() -> dict:
    """Where and at which commit a benchmark ran: CPU, ISA, BLAS kernel, versions, git."""
    from quantkit.environment import cpu_isa, cpu_name, numpy_blas

    try:
        import onnxruntime
        ort = onnxruntime.__version__
    except ImportError:
        ort = "not installed"
    import numpy

    dirty = [ln for ln in _git("status", "--porcelain", "--untracked-files=no").splitlines() if ln]
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "isa": " ".join(cpu_isa()) or "unknown",
            "blas": numpy_blas(), "python": platform.python_version(), "numpy": numpy.__version__,
            "onnxruntime": ort, "commit": _git("rev-parse", "HEAD") or "unknown",
            "dirty": len(dirty)}


def results_text(name: str, *, script: str | None = None, command: str, facts: dict, started: str, seconds: float,
                 load: tuple[float, float], rc: int, smoke: bool, output: str,
                 previous: str | None) -> str:
    """The results file of one run: its title, the latest run, and the earlier results of
    ``previous`` (the file as it was) kept below."""
    title, earlier = f"# {name}", ""
    if previous:
        lines = previous.splitlines()
        if lines and lines[0].startswith("# "):
            title, lines = lines[0], lines[1:]
        text = "\n".join(lines)
        if EARLIER in text:
            earlier = text[text.index(EARLIER):]
        elif LATEST not in text:  # the hand-migrated file: all of it is history
            earlier = EARLIER + "\n" + _demoted(text)
    out_lines = output.rstrip("\n").splitlines()
    last = out_lines[-1] if out_lines else ""
    dirty = (f", tree dirty ({facts['dirty']} tracked files changed)" if facts["dirty"]
             else ", tree clean")
    body = [
        title, "",
        f"Written by `benchmarks/{script or name}.py` itself (`benchmarks/_common.py: run_benchmark`): "
        "each full run replaces the section \"Latest run\"; the text below \"Earlier results\" "
        "is kept as it was written.", "",
        LATEST, "",
        f"- command: `{command}`" + (" (smoke mode: the smallest real run, not evidence)"
                                      if smoke else ""),
        f"- host: {facts['cpu']}, {facts['cores']} cores; ISA: {facts['isa']}; numpy BLAS: "
        f"{facts['blas']}",
        f"- load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f} on "
        f"{facts['cores']} cores" + (" (other processes were running: timings measured "
                                     "under load)" if load[0] > 0.5 else ""),
        f"- versions: Python {facts['python']}, numpy {facts['numpy']}, onnxruntime "
        f"{facts['onnxruntime']}",
        f"- commit: {facts['commit']}{dirty}",
        f"- date: {started}; wall time {seconds:.0f} s; exit code {rc}", "",
        "Output:", "", "```text", *out_lines, "```", "",
        f"Last line: `{last}`", "",
    ]
    if earlier:
        body += [earlier.rstrip("\n"), ""]
    return "\n".join(body)


def _demoted(text: str) -> str:
    """Markdown headings one level down (outside code fences): the history sits under
    :data:`EARLIER`."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = "#" + line
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def run_benchmark(name: str, main, argv: list[str] | None = None, *,
                  script: str | None = None) -> int:
    """Run a benchmark's ``main()`` and write its results file; returns its exit code.

    ``main`` parses ``sys.argv`` itself (its parser has :func:`bench_args`) and returns an
    exit code or None. What it prints is echoed as it comes and kept; when it returns (exit
    code 0 or 1: a measured result, even one that failed its check) the results file
    ``<name>.md`` is written to ``--results-dir``, else to benchmarks/results/ (a full run)
    or a new temporary directory (``--smoke``); its path goes to stderr. A benchmark that
    skipped (:func:`skip`) writes nothing. ``script``: the benchmark's file name when it is not
    ``name`` (one script that writes a results file per experiment).
    """
    argv = sys.argv[1:] if argv is None else argv
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--smoke", action="store_true")
    own.add_argument("--results-dir", type=Path, default=None)
    own.add_argument("-h", "--help", action="store_true")
    known, _ = own.parse_known_args(argv)
    if known.help:
        return main() or 0
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    facts = run_facts()  # the commit and tree the run starts from (a merge may land during it)
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        try:
            rc = main()
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.stdout = tee.out
    rc = int(rc or 0)
    output = tee.kept.getvalue()
    last = (output.strip().splitlines() or [""])[-1]
    if rc not in (0, 1) or not output.strip() or last.startswith(SKIP_PREFIX):
        return rc
    if known.results_dir is not None:
        folder = known.results_dir
    elif known.smoke:
        folder = Path(tempfile.mkdtemp(prefix=f"quantkit-bench-{name}-"))
    else:
        folder = RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    previous = path.read_text(encoding="utf-8") if path.is_file() else (
        (RESULTS_DIR / f"{name}.md").read_text(encoding="utf-8")
        if known.smoke and (RESULTS_DIR / f"{name}.md").is_file() else None)
    command = "python " + shlex.join([f"benchmarks/{script or name}.py", *argv])
    text = results_text(name, script=script or name, command=command, facts=facts,
                        started=started, seconds=time.perf_counter() - t0,
                        load=(load0, os.getloadavg()[0]), rc=rc, smoke=known.smoke,
                        output=output, previous=previous)
    atomic_write_text(path, text)  # never a half-written results file
    print(f"results: {path}", file=sys.stderr)
    return rc


def peak_rss_gb() -> float:
    """This process's peak resident set size in GB (Linux: ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def run_child(script: Path, *args: str) -> dict:
    """Run ``script`` in its own process; it prints one JSON line last. Returns that dict."""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{script.name} {' '.join(args)} failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# --- latency / throughput (benchmarks/latency.py; reusable by quantkit.bench) ----------------

def interleaved_latency(calls: dict, *, rounds: int = 7, warmup: int = 2,
                        repeat: int = 1) -> dict[str, list[float]]:
    """Seconds per call of every ``calls[name]()``, measured in interleaved rounds.

    Each model is called ``warmup`` times first (in the same interleaved order); then every
    round calls A B C D ... once each, ``repeat`` times back to back, and records the mean
    seconds per call of that block. Interleaving spreads machine noise (other processes,
    frequency changes) over every model instead of loading it onto whichever ran last.
    Returns name -> ``rounds`` samples.
    """
    import time

    for _ in range(warmup):
        for fn in calls.values():
            fn()
    out: dict[str, list[float]] = {n: [] for n in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for _ in range(repeat):
                fn()
            out[name].append((time.perf_counter() - t0) / repeat)
    return out


def median(xs) -> float:
    import statistics

    return float(statistics.median(xs))


INT8_KERNELS = ("MatMulIntegerToFloat", "QLinearMatMul", "QLinearConv", "DynamicQuantizeMatMul",
                "MatMulInteger", "ConvInteger", "QGemm", "QAttention", "QLinearAdd",
                "MatMulNBits")


def int8_kernel_coverage(optimized_model, quantized_nodes) -> dict:
    """Which of ``quantized_nodes`` ONNX Runtime ran as INT8 kernels.

    ``optimized_model``: the graph ONNX Runtime saved after optimization
    (``SessionOptions.optimized_model_filepath``; ``OrtRunner(save_optimized_to=...)``). ORT
    keeps the original node name on the INT8 kernel a quantized node fuses into
    (``MatMulIntegerToFloat``, ``QLinearMatMul``, ``QLinearConv`` ...; its NHWC layout pass
    appends ``_token_<k>``); a node that did not
    fuse stays a float op of its own name reading DequantizeLinear outputs.
    Returns ``{"covered": k, "total": n, "fraction": k / n, "kernels": {op: count},
    "not_fused": [name, ...], "census": kernel_census(...)}``.
    """
    import onnx

    from quantkit.backends.ort import kernel_census

    quantized_nodes = list(quantized_nodes)
    m = onnx.load(str(optimized_model), load_external_data=False)
    by_name: dict[str, str] = {}
    for n in m.graph.node:  # ORT's NHWC layout pass renames a fused Conv <name>_token_<k>
        if n.op_type not in ("Transpose", "QuantizeLinear", "DequantizeLinear"):
            by_name.setdefault(n.name.split("_token_")[0], n.op_type)
    kernels: dict[str, int] = {}
    not_fused = []
    for name in quantized_nodes:
        op = by_name.get(name)
        if op in INT8_KERNELS:
            kernels[op] = kernels.get(op, 0) + 1
        else:
            not_fused.append(f"{name} ({op or 'absent'})")
    total = len(quantized_nodes)
    covered = total - len(not_fused)
    return {"covered": covered, "total": total, "fraction": covered / total if total else 0.0,
            "kernels": kernels, "not_fused": not_fused, "census": kernel_census(optimized_model)}
