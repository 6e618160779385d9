"""Every benchmark's smoke mode runs (issue 48 point 9: no benchmark rots).

Each script under benchmarks/ (a module with a ``__main__`` guard; the rest, such as
``_common.py``, ``peers.py`` and verdict_validity's row modules, are helpers) runs as a
real subprocess with ``--smoke --results-dir <tmp>``, under the test session's private HOME
and quantkit cache (tests/conftest.py): it must exit 0, end with a line holding the
``key=value`` tokens benchmarks/README.md documents for it, and write its results file into
<tmp>, never into benchmarks/results/. A benchmark whose optional environment is missing
(a GPU, the ``.[sweeps]`` launchers) ends with one line ``skipped: <why>``: the test skips
with that reason. No assertion on time.

The results file's writer (``benchmarks/_common.py``) is tested here too, on text alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
README = BENCH / "README.md"
SKIP_PREFIX = "skipped: "

sys.path.insert(0, str(BENCH))

import _common  # noqa: E402


def documented() -> dict[str, list[str]]:
    """benchmark name -> the last-line keys its row in benchmarks/README.md names (the first
    code span of the row's "last-line keys" cell, keys separated by spaces)."""
    rows: dict[str, list[str]] = {}
    header: list[str] | None = None
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # not \|
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        if "last-line keys" not in header:
            continue
        m = re.fullmatch(r"`([a-z0-9_]+)\.py`", cells[0])
        if not m:
            continue
        spans = re.findall(r"`([^`]*)`", cells[header.index("last-line keys")])
        rows[m.group(1)] = spans[0].split() if spans else []
    return rows


def scripts() -> list[str]:
    """The benchmarks a user runs: modules under benchmarks/ with a ``__main__`` guard."""
    guard = 'if __name__ == "__main__":'
    return sorted(p.stem for p in BENCH.glob("*.py") if guard in p.read_text(encoding="utf-8"))


def last_line_keys(line: str) -> set[str]:
    return {tok.split("=", 1)[0] for tok in line.split() if "=" in tok}


def test_readme_documents_every_benchmark():
    rows = documented()
    assert sorted(rows) == scripts(), (
        f"benchmarks/README.md rows {sorted(rows)} != scripts {scripts()}: one row each")
    assert all(rows.values()), f"rows without last-line keys: {[n for n, k in rows.items() if not k]}"


@pytest.mark.parametrize("name", scripts())
def test_smoke_mode_runs_and_ends_with_its_documented_keys(name, tmp_path):
    keys = documented().get(name)
    assert keys, f"benchmarks/README.md documents no last-line keys for {name}.py"
    committed = BENCH / "results" / f"{name}.md"
    before = committed.read_bytes() if committed.is_file() else None
    out = tmp_path / "results"
    r = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke",
                        "--results-dir", str(out)], cwd=tmp_path, env=dict(os.environ),
                       capture_output=True, text=True, timeout=900)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert lines, r.stderr[-3000:]
    if lines[-1].startswith(SKIP_PREFIX):
        assert not (out / f"{name}.md").exists()
        pytest.skip(f"{name}.py: {lines[-1][len(SKIP_PREFIX):]}")
    missing = set(keys) - last_line_keys(lines[-1])
    assert not missing, f"last line {lines[-1]!r} lacks {sorted(missing)}"
    text = (out / f"{name}.md").read_text(encoding="utf-8")
    assert _common.LATEST in text and f"Last line: `{lines[-1]}`" in text
    assert "smoke mode" in text and "ISA:" in text and "commit:" in text
    after = committed.read_bytes() if committed.is_file() else None
    assert after == before, f"--smoke rewrote {committed}"


# ---------------------------------------------------------------------------------------
# the results file's writer

FACTS = {"cpu": "CPU X", "cores": 2, "isa": "avx2", "blas": "openblas 0.3 Haswell",
         "python": "3.11", "numpy": "2.0", "onnxruntime": "1.20", "commit": "abc", "dirty": 0}


def _write(previous: str | None, output: str = "a table\nx=1 y=2\n") -> str:
    return _common.results_text("demo", command="python benchmarks/demo.py", facts=FACTS,
                                started="2026-01-01 00:00:00 UTC", seconds=12.0,
                                load=(0.1, 1.2), rc=0, smoke=False, output=output,
                                previous=previous)


def test_results_file_keeps_the_migrated_history_below_the_latest_run():
    migrated = "# demo: a title\n\nSome words.\n\n## A section\n\n```text\n# not a heading\n```\n"
    text = _write(migrated)
    assert text.startswith("# demo: a title\n")
    latest, earlier = text.split(_common.EARLIER)
    assert "host: CPU X, 2 cores; ISA: avx2; numpy BLAS: openblas 0.3 Haswell" in latest
    assert "commit: abc, tree clean" in latest and "wall time 12 s" in latest
    assert "Last line: `x=1 y=2`" in latest
    assert "### A section" in earlier and "# not a heading" in earlier  # headings one down
    assert "Some words." in earlier


def test_a_second_run_replaces_only_the_latest_run():
    first = _write("# demo: a title\n\n## Old\n\nold figures\n")
    second = _write(first, output="z=3\n")
    assert second.count(_common.LATEST) == 1 and second.count(_common.EARLIER) == 1
    assert "Last line: `z=3`" in second and "x=1 y=2" not in second
    assert second.split(_common.EARLIER)[1] == first.split(_common.EARLIER)[1]


def test_a_first_run_without_history_has_no_earlier_section():
    text = _write(None)
    assert text.startswith("# demo\n") and _common.EARLIER not in text
