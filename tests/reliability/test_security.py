"""Security properties of the package: no pickle, no remote code by default, confined paths."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from quantkit.errors import CalibrationError, ConfigError
from quantkit.settings import Settings, check_plain_name

PKG = Path(__file__).resolve().parents[2] / "quantkit"
SOURCES = sorted(PKG.rglob("*.py"))


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            base = ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""
            yield node, name, base


def test_sources_are_found():
    assert len(SOURCES) > 30


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_pickle_anywhere(path):
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any(n.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "shelve")
                           for n in names), f"{path}: imports a pickle module"
    for call, name, base in _calls(tree):
        kwargs = {k.arg: k.value for k in call.keywords}
        if name in ("load", "loads") and base in ("np", "numpy"):
            v = kwargs.get("allow_pickle")
            assert v is not None and isinstance(v, ast.Constant) and v.value is False, \
                f"{path}:{call.lineno}: np.load without allow_pickle=False"
        if name == "load" and base == "torch":
            v = kwargs.get("weights_only")
            assert isinstance(v, ast.Constant) and v.value is True, \
                f"{path}:{call.lineno}: torch.load without weights_only=True"
        if name in ("read_pickle", "to_pickle"):
            pytest.fail(f"{path}:{call.lineno}: pandas pickle I/O")
        v = kwargs.get("allow_pickle")
        assert not (isinstance(v, ast.Constant) and v.value is True), \
            f"{path}:{call.lineno}: allow_pickle=True"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_trust_remote_code_is_never_on_by_default(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
            # passed through from settings (a name/attribute) or False, never a literal True
            assert not (isinstance(node.value, ast.Constant) and node.value.value is True), \
                f"{path}:{node.value.lineno}: trust_remote_code=True"
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        args = fn.args.args + fn.args.kwonlyargs
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults \
            + fn.args.kw_defaults
        for a, d in zip(args, defaults):
            if a.arg == "trust_remote_code":
                assert isinstance(d, ast.Constant) and d.value is False, \
                    f"{path}:{fn.lineno}: {fn.name}(trust_remote_code=...) must default to False"


def test_trust_remote_code_defaults_false_in_schema_and_configs():
    assert Settings().model.trust_remote_code is False
    for yml in (PKG.parent / "conf").rglob("*.yaml"):
        assert not re.search(r"trust_remote_code:\s*true", yml.read_text(), re.I), yml


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", ".hidden", "a..b", "", "x" * 200,
                                  "a b", "a\\b"])
def test_names_that_become_paths_are_confined(name):
    with pytest.raises(ConfigError):
        check_plain_name("experiment_name", name)


def test_plain_names_pass():
    for name in ("bert_int8", "mobilenet-int8.v2", "default"):
        check_plain_name("experiment_name", name)


@pytest.mark.parametrize("calibrator", ["../evil", "a/b", "/abs", ".x", "a..b"])
def test_ranges_calibrator_names_cannot_leave_the_run_dir(calibrator):
    from quantkit.calibrate.ranges import Ranges

    doc = Ranges(calibrator="minmax", params={}, amax={"t": 1.0}).to_dict()
    doc["calibrator"] = calibrator
    with pytest.raises(CalibrationError, match="plain name"):
        Ranges.from_dict(doc)


def test_stage_cache_names_are_confined(tmp_path):
    from quantkit.cache import StageCache, stage_key

    cache = StageCache(tmp_path)
    with pytest.raises(ConfigError):
        cache.entry_dir("../escape", stage_key("x"))
    with pytest.raises(ConfigError):
        cache.put("calibrate", stage_key("x"), files={"../../etc/passwd": tmp_path / "f"})
