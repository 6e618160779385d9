"""Each post-training technique (quantkit.ptq) alone and combined, on exact Q/DQ numerics.

Full INT8 on the experiment's weighted-op scope (TensorRT target, int8 weight initializers),
FP32 remainder, evaluated on ONNX Runtime CPU with basic graph optimizations only (no Q/DQ
fusion into x86 integer kernels, which are not exact on AVX2 hosts). Accuracy and top-1
agreement with FP32 on the eval split head (``--eval-limit``, default 1000).

    python benchmarks/ptq_techniques.py --model bert_int8 --calibrator percentile \\
        --configs base,sq,rs,bc,sq+rs+bc
    python benchmarks/ptq_techniques.py --smoke    # base and sq+bc, 16 eval examples
Config letters: sq = SmoothQuant (alpha via --alpha), eq = cross-layer equalization,
eqa = activation-aware equalization (alpha via --alpha),
rs = range search, bc = bias correction. One line per config, then the summary line
``model=<m> acc_fp32=<a> <config>:acc=<a>,agree=<g> ...``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert_int8", choices=["bert_int8", "mobilenet_int8"])
    ap.add_argument("--eval-limit", type=int, default=1000)
    ap.add_argument("--eval-offset", type=int, default=0,
                    help="evaluate eval examples [offset, offset + limit): a held-out check")
    ap.add_argument("--combine", default="widest", choices=["widest", "sum"],
                    help="range search: how a tensor read by several INT8 nodes is decided")
    ap.add_argument("--calibrator", default="percentile")
    ap.add_argument("--configs", default="base,sq,rs,bc,sq+rs+bc")
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--capture-samples", type=int, default=32)
    ap.add_argument("--records", default=None,
                    help="directory: write each config's step records (JSON) there")
    ap.add_argument("--only", default=None,
                    help="regexes separated by ;, one run each: only INT8 nodes whose name matches stay INT8 (diagnosis)")
    _common.bench_args(ap, "the configs base and sq+bc on 16 eval examples, 16 calibration "
                           "samples")
    a = ap.parse_args()
    smoke = ("data.calib.num_samples=16", "calibrator.batch_size=8") if a.smoke else ()
    if a.smoke:
        a.eval_limit, a.configs, a.capture_samples = 16, "base,sq+bc", 8
    s, model, splits, enc = _common.setup(a.model, *smoke)
    end = min(a.eval_offset + a.eval_limit, len(splits.eval))
    evals = splits.eval.subset(range(a.eval_offset, end), "eval")

    import numpy as np
    import onnx

    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import OrtRunner
    from quantkit.calibrate import activation_tensors, collect_stats, select_tensors
    from quantkit.backends.runners import calibration_runner
    from quantkit.calibrate.calibrators import make_calibrator
    from quantkit.calibrate.ranges import compute_ranges
    from quantkit.precision.plan import build_plan
    from quantkit.ptq.pipeline import CalibData, refine, rewrite
    from quantkit.settings.ptq_recipe import Recipe
    from quantkit.graph.facts import ensure_node_names
    from quantkit.qdq.insert import insert_qdq
    from quantkit.qdq.lint import lint_for_target

    feeds = enc
    p, c = s.precision, s.calibrator
    y = np.asarray(evals.labels)
    lengths = feeds.lengths(evals) if hasattr(feeds, "lengths") else None
    out_name = model.output_name

    def calib_batches(n=None):
        data = splits.calib if n is None else splits.calib.subset(range(min(n, len(splits.calib))), "calib")
        return [f for _, f in feeds.batches(data, c.batch_size)]

    def evaluate(m, name):
        t0 = time.perf_counter()
        with OrtRunner(m, name=name, graph_optimization_level="basic") as r:
            logits = run_split(r, feeds, evals, output=out_name,
                               batch_size=s.backend.batch_size, progress=False, lengths=lengths)
        return logits, time.perf_counter() - t0

    base = onnx.load(model.path)
    ensure_node_names(base)
    ref, sec = evaluate(base, "fp32")
    ref_pred = ref.argmax(1)
    acc_fp32 = float((ref_pred == y).mean())
    print(f"fp32 acc={acc_fp32:.4f} eval={len(y)} (examples {a.eval_offset}..{end - 1} of the "
          f"eval split; {sec:.0f}s)", flush=True)
    cal_all = calib_batches()
    rows = []
    jobs = [(cfg, only) for cfg in a.configs.split(",")
            for only in (a.only.split(";") if a.only else [None])]
    for config, only in jobs:
        steps = set(config.split("+")) - {"base"}
        t0 = time.perf_counter()
        opts = Recipe(smoothquant_alpha=a.alpha if "sq" in steps else None,
                          equalization=("per_channel_clip" if {"eq", "eqa"} & steps else "off"),
                          equalization_alpha=a.alpha if "eqa" in steps else None,
                          range_search="rs" in steps, range_search_combine=a.combine,
                          bias_correction="bc" in steps)
        data = CalibData(batches=lambda: cal_all,
                         subset=lambda: calib_batches(a.capture_samples))
        rw = rewrite(base, opts, data, output=out_name)
        m, records = rw.model, list(rw.steps)
        targets = select_tensors(m, op_types=tuple(p.op_types))
        tensors = activation_tensors(targets)
        res = collect_stats(m, cal_all, tensors, num_bins=c.num_bins, progress=False, runner_factory=calibration_runner)
        cals = {k: make_calibrator(k, **({"percentile": c.percentile} if k == "percentile" else {}))
                for k in ("minmax", "percentile", "entropy", "mse")}
        ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen)
        r0 = ranges[a.calibrator]
        plan = build_plan(m, amax=r0.amax, excluded=r0.excluded, op_types=p.op_types,
                          include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                          remainder="fp32", calibrator=a.calibrator)
        if only:
            keep = re.compile(only)
            drop = [n for n in plan.int8_nodes() if not keep.search(n)]
            plan = plan.with_precision(drop, "fp32", "--only")
        refined = refine(m, plan, ranges, opts, data, target=s.target)
        plan, m, records = refined.plan, refined.model, records + list(refined.records)
        q, _ = insert_qdq(m, plan, target=s.target, int8_weights=True)
        violations = lint_for_target(q, s.target, nonfinite_tensors=set(r0.excluded))
        prep = time.perf_counter() - t0
        logits, sec = evaluate(q, config)
        pred = logits.argmax(1)
        margin = np.abs(ref[:, 1] - ref[:, 0]) if ref.shape[1] == 2 else None
        flips = pred != ref_pred
        row = {"config": config, "only": only, "calibrator": a.calibrator, "int8_nodes": len(plan.int8_nodes()),
               "acc": float((pred == y).mean()), "agree": float((pred == ref_pred).mean()),
               "lint_violations": len(violations), "size_mb": round(q.ByteSize() / 1e6, 1),
               "prep_s": round(prep, 1), "eval_s": round(sec, 1),
               "logit_nmse": float(np.mean((logits - ref) ** 2) / np.mean(ref ** 2)),
               "flip_margin_median": (float(np.median(margin[flips])) if margin is not None
                                      and flips.any() else None),
               "steps": [r.summary() for r in records]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.records:
            out = Path(a.records) / f"{config}{'.' + re.sub(r'[^A-Za-z0-9]+', '_', only) if only else ''}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"row": row, "records": [r.to_dict() for r in records]},
                                      indent=1))
    print(f"model={a.model} acc_fp32={acc_fp32:.4f} " + " ".join(
        f"{r['config']}:acc={r['acc']:.4f},agree={r['agree']:.4f}" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("ptq_techniques", main))
