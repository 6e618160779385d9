"""Sensitivity search cost: quantkit's ranked galloping/bisection vs a one-layer-at-a-time
fallback (Intel Neural Compressor style: restore layers in ranking order, one full evaluation
after each, until the verdict passes) for the same result, on bert_int8 or mobilenet_int8.

    python benchmarks/sensitivity.py [--calibrator all|minmax|percentile|entropy|mse]
    python benchmarks/sensitivity.py --model mobilenet_int8   # or: model=mobilenet_int8
    python benchmarks/sensitivity.py --smoke     # the tests' tiny world (2 MatMuls)

One whole run of the experiment in-process (``quantkit.run``); the full run writes
benchmarks/results/sensitivity.md.

Last line: full_evals_quantkit=<n> full_evals_linear=<m> mixed_verdict=<...> fp16_layers=<k>/<L>
(prefixed ``model=<experiment> `` for models other than the default bert_int8; ``model=tiny``
with ``--smoke``)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrator", default="all")
    ap.add_argument("--experiment", "--model", dest="experiment", default="bert_int8")
    ap.add_argument("--eval-limit", type=int, default=None)
    _common.bench_args(ap, "one run of the tests' tiny world (2 MatMuls, 120 snippets)")
    a = ap.parse_args([f"--model={x.split('=', 1)[1]}" if x.startswith("model=") else x
                       for x in sys.argv[1:]])
    import quantkit
    from quantkit.precision.fp16_search import linear_evals_needed

    overrides = [f"calibrator={a.calibrator}", "progress=false", "report.formats=[json]"]
    if a.eval_limit:
        overrides.append(f"data.eval.limit={a.eval_limit}")
    with tempfile.TemporaryDirectory() as tmp:
        if a.smoke:
            a.experiment = "tiny"
            overrides = _common.tiny_overrides(Path(tmp) / "world", *overrides)
        else:
            overrides = [f"experiment={a.experiment}", *overrides]
        rec = quantkit.run(overrides=overrides, run_dir=Path(tmp) / "run")
    written = rec.to_dict()  # record.json as the run writes it
    s = written.get("search")
    if not s:
        print("no search ran (no INT8 candidate)")
        return 1
    L = s["quantizable_layers"]
    found = s["fp16_nodes"] if s["status"] == "PASS" else None
    linear = linear_evals_needed(s["ranking"], found)
    linear_inc = linear_evals_needed(s["ranking"], found, per_layer_measurement=True)
    print(f"model={a.experiment} calibrator={s['calibrator']} quantizable layers L={L} "
          f"bound 2*ceil(log2 L)+2 = {s['bound']}")
    print(f"{'#':>3} {'phase':<9} {'fp16':>5} {'status':<13} {'delta':>9} {'interval':>22} {'s':>6}")
    for e in s["evaluations"]:
        lo, hi = e["interval"]
        print(f"{e['index']:>3} {e['phase']:<9} {e['fp16_count']:>5} {e['status']:<13} "
              f"{e['metric']:>+9.4f} [{lo:+.4f}, {hi:+.4f}] {e['seconds']:>6.1f}")
    print(f"ranking: {s.get('measured_note')}; measured sensitivity cost: "
          f"{s.get('measure_cost', {}).get('evaluations', 0)} subset evaluations")
    print(f"one-layer-at-a-time fallback: {linear} full evaluations in this ranking order "
          f"({linear_inc} counting INC's own per-layer measurement)")
    mixed = written["candidates"].get("mixed", {}).get("verdict", {}).get("status", "na")
    prefix = "" if a.experiment == "bert_int8" else f"model={a.experiment} "
    print(f"{prefix}full_evals_quantkit={s['full_evals']} full_evals_linear={linear} "
          f"mixed_verdict={mixed} fp16_layers={len(s['fp16_nodes'])}/{L}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("sensitivity", main))
