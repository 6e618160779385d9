"""The layout ARCHITECTURE.md states, checked on the source: no import circle (between modules,
or between the package's folders and top-level files), each layer rule, one ONNX Runtime
factory, imports at the top of quantkit/run/, tensorrt imported lazily.

Every ``import`` statement counts, at module level, inside functions and under
``TYPE_CHECKING``: a circle that an import inside a function hides is still a circle.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "quantkit"

#: imports inside functions allowed in quantkit/run/ (module -> why); none today
RUN_NESTED_IMPORTS: dict[str, str] = {}


@cache
def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _resolve(name: str) -> str | None:
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports() -> dict[str, dict[str, list[int]]]:
    """module -> imported quantkit module -> line numbers of the import statements."""
    out: dict[str, dict[str, list[int]]] = {}
    for mod, path in modules().items():
        edges: dict[str, list[int]] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == "quantkit":
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules()
                           else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "quantkit"]
            for t in targets:
                r = _resolve(t)
                if r is not None and r != mod:
                    edges.setdefault(r, []).append(node.lineno)
        out[mod] = edges
    return out


def _room(mod: str) -> str:
    """A module's room: its folder under quantkit/ (quantkit/run), or the top-level file."""
    parts = mod.split(".")
    if len(parts) == 1:
        return "quantkit/__init__.py"
    if modules()[mod].parent == PKG:
        return f"quantkit/{parts[1]}.py"
    return f"quantkit/{parts[1]}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _importers(of: str) -> dict[str, str]:
    """module -> the first module it imports at or under the dotted prefix ``of``."""
    out = {}
    for mod, edges in imports().items():
        hits = [t for t in edges if t == of or t.startswith(of + ".")]
        if hits:
            out[mod] = sorted(hits)[0]
    return out


def test_no_import_circle_between_modules():
    graph = {m: set(e) for m, e in imports().items()}
    assert _cycles(graph) == []


def test_no_import_circle_between_folders_and_top_level_files():
    graph: dict[str, set[str]] = {}
    for mod, edges in imports().items():
        for t in edges:
            if _room(mod) != _room(t):
                graph.setdefault(_room(mod), set()).add(_room(t))
    assert _cycles(graph) == []


@pytest.mark.parametrize("lower, upper", [
    ("quantkit.graph", "quantkit.calibrate"),
    ("quantkit.graph", "quantkit.precision"),
    ("quantkit.graph", "quantkit.qdq"),
    ("quantkit.precision", "quantkit.qdq"),
    ("quantkit.compare", "quantkit.run"),
    ("quantkit.verdict", "quantkit.run"),
    ("quantkit.calibrate", "quantkit.run"),
    ("quantkit.qdq", "quantkit.run"),
    ("quantkit.ptq", "quantkit.run"),
    ("quantkit.backends", "quantkit.run"),
    ("quantkit.data", "quantkit.run"),
    ("quantkit.models", "quantkit.run"),
    ("quantkit.record", "quantkit.run"),
    ("quantkit.report", "quantkit.run"),
    ("quantkit.record", "quantkit.report"),
    ("quantkit.tasks", "quantkit.run"),
    ("quantkit.verdict", "quantkit.tasks"),
    ("quantkit.data", "quantkit.tasks"),
])
def test_a_lower_layer_never_imports_a_higher_one(lower, upper):
    """ARCHITECTURE.md's layers: graph facts under calibration, planning and Q/DQ; planning
    under Q/DQ; the libraries of each job and the record / report under the run."""
    wrong = {m: t for m, t in _importers(upper).items() if m == lower or m.startswith(lower + ".")}
    assert wrong == {}


def test_the_run_and_the_app_are_imported_only_by_the_entry_points():
    allowed = ("quantkit.app", "quantkit.api", "quantkit.__main__", "quantkit.run")
    entry = {"quantkit"}  # quantkit/__init__.py: quantkit.run(...) loads the API when called
    for of in ("quantkit.run", "quantkit.app", "quantkit.api"):
        wrong = {m: t for m, t in _importers(of).items()
                 if m not in entry and not any(m == a or m.startswith(a + ".") for a in allowed)}
        assert wrong == {}, of


def test_a_run_helper_never_imports_a_stage():
    """quantkit/run/*.py are the helpers the stages share: values flow one way."""
    wrong = {m: t for m, t in _importers("quantkit.run.stages").items()
             if m.startswith("quantkit.run.") and not m.startswith("quantkit.run.stages")}
    assert wrong == {}


def test_every_stage_is_a_function_of_its_own_name_and_app_calls_it():
    stages = sorted(p.stem for p in (PKG / "run" / "stages").glob("*.py")
                    if p.stem != "__init__")
    app = (PKG / "app.py").read_text(encoding="utf-8")
    for stage in stages:
        tree = ast.parse((PKG / "run" / "stages" / f"{stage}.py").read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert stage in names, stage
        assert f"from quantkit.run.stages.{stage} import" in app, stage


def test_one_onnx_runtime_factory():
    """Every ONNX Runtime session comes from quantkit/backends/ (runners.ort_runner)."""
    wrong = [f"{p.relative_to(ROOT)}:{i}" for p in PKG.rglob("*.py")
             if "backends" not in p.relative_to(PKG).parts
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bOrtRunner\(", line) and not line.lstrip().startswith("#")
             and "``" not in line]
    assert wrong == []


def test_imports_are_at_the_top_of_every_run_module():
    wrong = []
    for p in sorted((PKG / "run").rglob("*.py")):
        rel = str(p.relative_to(ROOT))
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)) \
                            and rel not in RUN_NESTED_IMPORTS:
                        wrong.append(f"{rel}:{inner.lineno}")
    assert wrong == []


def test_tensorrt_is_imported_lazily_and_import_quantkit_is_cheap():
    eager = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in PKG.rglob("*.py")
             for n in ast.parse(p.read_text(encoding="utf-8")).body
             if isinstance(n, (ast.Import, ast.ImportFrom))
             and any((a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
                     == "tensorrt" for a in n.names)]
    assert eager == []
    code = ("import sys, quantkit; quantkit.run; "
            "print(sorted(m for m in ('tensorrt', 'torch', 'transformers', 'onnxruntime') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


def test_quantkit_run_is_the_package_and_the_api_function():
    import quantkit
    import quantkit.run.context  # the package imported first, as a stage would

    assert callable(quantkit.run) and quantkit.run.context is quantkit.run.context
    from quantkit import run

    assert run is quantkit.run and callable(run)
