"""Shared setup for benchmarks: the bert_int8 model, splits and encoder, via quantkit itself."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def settings_for(experiment: str = "bert_int8", *overrides: str):
    from hydra import compose, initialize_config_dir

    from quantkit.settings import build, register

    register()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={experiment}", "progress=false",
                                                       *overrides])
    return build(cfg)


def setup(experiment: str = "bert_int8", *overrides: str):
    """(settings, model, splits, encoder) exactly as a quantkit run prepares them."""
    from quantkit.app import text_encoder
    from quantkit.assets import cache_root
    from quantkit.data import load_splits
    from quantkit.models import prepare_model

    s = settings_for(experiment, *overrides)
    cache = cache_root(s.cache_dir)
    splits = load_splits(s, cache_dir=cache)
    model = prepare_model(s, splits, cache_dir=cache)
    return s, model, splits, text_encoder(s, model)


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
