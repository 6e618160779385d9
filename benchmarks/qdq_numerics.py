"""Q/DQ execution numerics on a real artifact: ORT's fused integer kernels vs exact Q/DQ,
and the FP16 artifact vs its emulation.

    flock /tmp/qk-heavy.lock python benchmarks/qdq_numerics.py --run-dir <run_dir> [--plan int8.mse]
    python benchmarks/qdq_numerics.py --smoke   # its own int8.mse plan, 16 eval examples

Reads the plan a run wrote (``<run dir>/plans/<plan>.json``), rebuilds the artifacts from the
experiment's FP32 model (FP32 remainder, FP16 remainder, FP16 emulation) and evaluates each
on the eval split with each ``qdq_mode`` (``backends/ort.py``: fused, exact, integer). Prints
accuracy, flip rates and max logit differences, then one JSON line, then the summary line
``n=<n> plan=<plan> models=<k> acc_min=<a> acc_max=<b> worst_pair=<p>/<q>
worst_flip_rate=<r>``. ``--smoke`` writes its own plan first (the run's ptq, calibration and
artifact code, ``ptq.recipe=none calibrator=mse``, 16 calibration samples) into a temporary
run dir.

Measured flips and logit differences: benchmarks/results/qdq_numerics.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import _common

#: --smoke: the smallest real run (a handful of examples)
SMOKE = ("data.calib.num_samples=16", "calibrator.batch_size=8", "data.dev.limit=16",
         "data.test.limit=16", "data.eval.limit=16")


def write_plan(overrides, run_dir: Path, name: str) -> None:
    """Write ``<run_dir>/plans/<name>.json`` as a run does (``ptq.recipe=none``, the
    calibrator of ``name``): the run's stages on a prepared context."""
    from quantkit.app import prepared_context
    from quantkit.run.artifact import build_artifact
    from quantkit.run.plans import plan_for_ranges
    from quantkit.run.scope import quant_scope
    from quantkit.run.stages.calibration import calibration
    from quantkit.run.stages.fp16_range_check import fp16_range_check
    from quantkit.run.stages.fp32_reference import fp32_reference
    from quantkit.run.stages.ptq import ptq

    method = name.split(".", 1)[1]
    s = _common.settings_for("bert_int8", *overrides, "ptq.recipe=none", f"calibrator={method}")
    ctx = prepared_context(s, run_dir)
    overflow = fp16_range_check(ctx)
    sources = ptq(ctx, quant_scope(ctx), overflow, fp32_reference(ctx, "dev"))
    rng = calibration(ctx, sources).ranges[method]
    build_artifact(ctx, name, plan_for_ranges(ctx, rng, overflow), nonfinite=rng.excluded)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", default=None, help="a run's directory (required but with --smoke)")
    ap.add_argument("--plan", default="int8.mse")
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--variants", default="fp32rem,fp16,emu",
                    help="fp32rem (FP32 remainder), fp16 (the artifact), emu (its FP16 "
                         "emulation), fp16s / emus (the same with FP16 Q/DQ scales, opset 19)")
    ap.add_argument("--modes", default="fused,exact", help="qdq_mode values (fused,exact,integer)")
    ap.add_argument("--save", default=None, help="npz file for the logits")
    ap.add_argument("--plan-rules", action="store_true",
                    help="re-plan the FP16 remainder with this branch's default FP32 rules")
    _common.bench_args(ap, "its own int8.mse plan of bert_int8 (16 calibration samples), then "
                           "the default variants and modes on 16 eval examples")
    a = ap.parse_args()
    overrides = [f"data.eval.limit={a.eval_limit}"] if a.eval_limit else []
    tmp = None
    if a.smoke:
        overrides = list(SMOKE)
        if a.run_dir is None:
            tmp = tempfile.TemporaryDirectory(prefix="qdq-numerics-")
            a.run_dir = tmp.name
            write_plan(overrides, Path(a.run_dir), a.plan)
    if a.run_dir is None:
        ap.error("--run-dir is required (a run's directory, with plans/<plan>.json)")
    s, model, splits, enc = _common.setup("bert_int8", *overrides)

    import numpy as np
    import onnx

    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import OrtRunner
    from quantkit.environment import cpu_isa, cpu_name
    from quantkit.precision.plan import Plan
    from quantkit.qdq.casts import convert_fp16, emulate_fp16
    from quantkit.graph.facts import ensure_node_names
    from quantkit.qdq.insert import insert_qdq

    lengths = enc.lengths(splits.eval)
    y = splits.eval.labels
    proto = onnx.load(model.path)
    ensure_node_names(proto)
    plan = Plan.from_dict(json.loads((Path(a.run_dir) / "plans" / f"{a.plan}.json").read_text()))
    if a.plan_rules:
        from quantkit.precision.fp16_rules import normalization_fp32_reasons
        keep = normalization_fp32_reasons(proto)
        plan = plan.with_precision([n for n in keep if plan.precision_of(n).value == "fp16"],
                                   "fp32", "normalization kept FP32")
    fp16_nodes = plan.nodes_with("fp16")
    edited, _ = insert_qdq(proto, plan)
    models = {}
    variants = a.variants.split(",")
    if "fp32rem" in variants:
        plan32 = plan.with_precision(fp16_nodes, "fp32", "FP32 remainder") if fp16_nodes else plan
        models["fp32rem"] = insert_qdq(proto, plan32)[0]
    if "fp16" in variants:
        models["fp16"] = convert_fp16(edited, plan)
    if "emu" in variants:
        models["emu"] = emulate_fp16(edited, plan)
    if "fp16s" in variants:
        models["fp16s"] = convert_fp16(edited, plan, qdq_scale_dtype="fp16")
    if "emus" in variants:
        models["emus"] = emulate_fp16(edited, plan, qdq_scale_dtype="fp16")
    logits = {}
    for name, m in models.items():
        for mode in a.modes.split(","):
            t0 = time.perf_counter()
            with OrtRunner(m, name=f"{name}-{mode}", qdq_mode=mode,
                           disabled_optimizers=s.backend.disabled_optimizers) as r:
                logits[f"{name}.{mode}"] = run_split(r, enc, splits.eval, output=model.output_name,
                                                     batch_size=s.backend.batch_size,
                                                     progress=False, lengths=lengths)
            print(f"{name}.{mode}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    if a.save:
        np.savez(a.save, y=y, **logits)
    acc = {k: float((v.argmax(1) == y).mean()) for k, v in logits.items()}
    pairs = {}
    for p, q in combinations(logits, 2):
        flips = int((logits[p].argmax(1) != logits[q].argmax(1)).sum())
        pairs[f"{p} vs {q}"] = {"flips": flips, "flip_rate": flips / len(y),
                                "max_logit_diff": float(np.abs(logits[p] - logits[q]).max())}
    print(f"host: {cpu_name()} isa={','.join(cpu_isa())}; n={len(y)}; plan {a.plan}: "
          f"{plan.counts()}")
    for k, v in acc.items():
        print(f"  accuracy {k:<16} {v:.4f}")
    for k, v in pairs.items():
        print(f"  {k:<34} flips {v['flips']:>4} ({v['flip_rate']:.4f})  max |dlogit| "
              f"{v['max_logit_diff']:.4g}")
    print(json.dumps({"n": len(y), "accuracy": acc, "pairs": pairs}))
    worst = max(pairs, key=lambda k: pairs[k]["flip_rate"]) if pairs else None
    print(f"n={len(y)} plan={a.plan} models={len(acc)} acc_min={min(acc.values()):.4f} "
          f"acc_max={max(acc.values()):.4f} "
          f"worst_pair={worst.replace(' vs ', '/') if worst else 'none'} "
          f"worst_flip_rate={pairs[worst]['flip_rate'] if worst else 0.0:.4f}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("qdq_numerics", main))
