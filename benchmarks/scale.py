"""How quantkit's cost grows with the model: bert_int8 (MiniLM-L6, 22.7M parameters) and
mpnet_int8 (all-mpnet-base-v2, 109M) in one run, on the same machine, each a new user's cold
run (``python -m quantkit experiment=<name>`` in a child process with an empty cache, HOME and
ledger of its own: ``benchmarks/experiment.py``'s child).

Printed: per stage, each run's wall seconds and peak RSS (the record's ``stages``), and the
ratios mpnet / MiniLM; the models' parameters (ONNX initializer elements) and weighted-GEMM
FLOPs per example (2 x tokens x K x N for every MatMul / Gemm with a constant weight, at
``data.max_length`` tokens: what grows with width and depth). Last line::

    params_ratio=<p> gemm_flops_ratio=<f> wall_ratio=<w> rss_ratio=<r> agree_minilm=<a>
    agree_mpnet=<b>

``agree_*``: the recommended candidate's top-1 agreement with FP32 on test. Issue 47's
acceptance: wall_ratio <= 3 while gemm_flops_ratio is about 8, mpnet's peak RSS <= 4 GB.

    python benchmarks/scale.py [--work-dir DIR]
    python benchmarks/scale.py --smoke      # the tests' tiny world twice (the plumbing)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import _common
import experiment

MODELS = ("bert_int8", "mpnet_int8")


def model_cost(path: Path, tokens: int) -> tuple[int, float]:
    """(parameters, weighted-GEMM FLOPs per example at ``tokens`` tokens) of an ONNX model:
    initializer elements; 2 x tokens x K x N per MatMul / Gemm whose second input is a
    2-D initializer (the activations' GEMMs, attention's scores, are left out: they grow
    with length, not with the weights)."""
    m = onnx.load(str(path), load_external_data=True)
    inits = {t.name: t for t in m.graph.initializer}
    params = sum(int(np.prod(t.dims)) for t in inits.values())
    flops = 0.0
    for node in m.graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 \
                and node.input[1] in inits and len(inits[node.input[1]].dims) == 2:
            k, n = (int(d) for d in inits[node.input[1]].dims)
            flops += 2.0 * tokens * k * n
    return params, flops


def _model_file(record) -> Path | None:
    path = Path(record.model.path) if record is not None and record.model is not None else None
    return path if path is not None and path.is_file() else None


def _agreement(record) -> float | None:
    c = record.candidate(record.recommended) if record is not None else None
    return c.agreement_fp32 if c is not None else None


def _fmt(v, spec: str = ".2f") -> str:
    return "na" if v is None else format(v, spec)


def main() -> int:
    ap = _common.bench_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]),
                            "the tests' tiny world twice (the plumbing only)")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="where the cold caches and run dirs go (default: a temporary dir)")
    a = ap.parse_args()
    work = Path(a.work_dir or tempfile.mkdtemp(prefix="quantkit-scale-"))
    runs = {}
    for name in MODELS:
        if a.smoke:
            overrides = [o for o in _common.tiny_overrides(work / "world", "progress=false")
                         if not o.startswith("cache_dir=")]
        else:
            overrides = [f"experiment={name}", "progress=false"]
        print(f"{name}: cold run in {work / name}", flush=True)
        r = experiment._child(overrides, work / name, None, name)
        runs[name] = r
        print(f"  rc {r['rc']}, wall {r['wall']:.0f} s, peak RSS {r['rss_gb']:.2f} GB",
              flush=True)
        if r["rc"] != 0:
            err = r["stderr"].read_text(encoding="utf-8", errors="replace").strip()
            print("\n".join(err.splitlines()[-5:]))
    small, big = (runs[m] for m in MODELS)
    rs, rb = small["record"], big["record"]
    print(f"\n{'stage':<18} {'MiniLM s':>9} {'MPNet s':>9} {'ratio':>6} {'MiniLM GB':>10} "
          f"{'MPNet GB':>9}")
    stages = list(rs.stages) if rs is not None else []
    for st in stages + [s for s in (rb.stages if rb is not None else []) if s not in stages]:
        x = rs.stages.get(st) if rs is not None else None
        y = rb.stages.get(st) if rb is not None else None
        ratio = (y.seconds / x.seconds) if x and y and x.seconds > 0 else None
        print(f"{st:<18} {_fmt(x.seconds if x else None, '.1f'):>9} "
              f"{_fmt(y.seconds if y else None, '.1f'):>9} {_fmt(ratio):>6} "
              f"{_fmt(x.peak_rss_gb if x else None):>10} "
              f"{_fmt(y.peak_rss_gb if y else None):>9}")
    tokens = rs.configured("data", "max_length") if rs is not None else None
    costs = {m: model_cost(f, int(tokens or 128)) if (f := _model_file(runs[m]["record"]))
             else (None, None) for m in MODELS}
    (p1, f1), (p2, f2) = costs[MODELS[0]], costs[MODELS[1]]
    for m in MODELS:
        p, f = costs[m]
        print(f"{m}: {_fmt(p, ',')} parameters, {_fmt(f and f / 1e9, '.2f')} GFLOP of "
              f"weighted GEMMs per example at {tokens} tokens")

    def ratio(x, y):
        return None if not x or y is None else y / x

    print(f"params_ratio={_fmt(ratio(p1, p2))} gemm_flops_ratio={_fmt(ratio(f1, f2))} "
          f"wall_ratio={_fmt(ratio(small['wall'], big['wall']))} "
          f"rss_ratio={_fmt(ratio(small['rss_gb'], big['rss_gb']))} "
          f"agree_minilm={_fmt(_agreement(rs), '.4f')} agree_mpnet={_fmt(_agreement(rb), '.4f')}",
          flush=True)
    return 0 if all(r["rc"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("scale", main))
