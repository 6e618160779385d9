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
    """(settings, model, splits, feeds) exactly as a quantkit run prepares them: the feeds
    are a TextFeeds or an ImageFeeds (quantkit.data.feeds.make_feeds)."""
    from quantkit.data.feeds import make_feeds
    from quantkit.assets import cache_root
    from quantkit.data import load_splits
    from quantkit.models import load_model

    s = settings_for(experiment, *overrides)
    cache = cache_root(s.cache_dir)
    splits = load_splits(s, cache_dir=cache)
    model = load_model(s, splits, cache_dir=cache)
    return s, model, splits, make_feeds(s, model)


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
