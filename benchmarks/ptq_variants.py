"""Full-INT8 variants of an experiment on the dev (or test) split, exact Q/DQ numerics.

One calibration pass per distinct pre-calibration rewrite (SmoothQuant alpha, equalization),
then one INT8 plan per variant: calibrator, range search, bias correction, an optional
restriction of the INT8 set (diagnosis), FP16 remainder emulated as a run evaluates it.
Evaluated on ONNX Runtime CPU with ``session.disable_quant_qdq`` (exact Q/DQ, the run's
``backend.qdq_mode=exact``). Prints one JSON line per variant: accuracy, agreement with FP32.

    python benchmarks/ptq_variants.py --model bert_int8 --split dev \\
        --variants "cal=percentile,sq=0.8,rs=1,bc=1;cal=mse,sq=0.8,rs=1"
    python benchmarks/ptq_variants.py --smoke    # two variants, 16 dev examples

The last line sums them up: ``model=<m> split=<split> n=<n> acc_fp32=<a> variants=<k>
best_variant=<spec> best_agree=<its agreement with FP32>`` (the best dev agreement).
Variant keys: cal (calibrator), sq (SmoothQuant alpha, 0 = off), rs (range search 0/1),
bc (bias correction 0/1), comb (widest|sum), err (tensor|row range-search error), rsn (range-search samples), grid,
only (regex: only matching INT8 nodes stay INT8), drop (regex: matching nodes leave INT8),
eq (equalization alpha, 'w' = weight-only, 0 = off), rem (fp16|fp32 remainder),
wr (weight rounding: nearest|gptq|gptq_aware|gptq_sequential), st (stream scaling alpha, 0 = off),
ptq.* overrides are not needed: every key maps to one Recipe field.
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


#: --smoke: a plain variant and one with SmoothQuant and bias correction
SMOKE_VARIANTS = "cal=percentile,rs=0;cal=mse,sq=0.8,rs=0,bc=1"


def parse(spec: str) -> dict:
    out = {"cal": "percentile", "sq": "0", "rs": "1", "bc": "0", "comb": "widest", "err": "tensor", "rsn": "32",
           "grid": "16", "only": "", "drop": "", "eq": "0", "rem": "fp16", "wr": "nearest", "st": "0"}
    for kv in filter(None, spec.split(",")):
        k, v = kv.split("=", 1)
        if k not in out:
            raise SystemExit(f"unknown variant key {k!r} in {spec!r}")
        out[k] = v
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert_int8")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--variants", default=None, help="variants separated by ; (required)")
    ap.add_argument("--override", action="append", default=[],
                    help="Hydra overrides of the experiment (e.g. calibrator.num_samples=512)")
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    ap.add_argument("--test-top", type=int, default=0,
                    help="then evaluate the K variants with the best dev agreement (and the "
                         "first variant, the baseline) once on the test split")
    _common.bench_args(ap, f"the variants {SMOKE_VARIANTS!r} on 16 dev examples, 16 "
                           "calibration samples")
    a = ap.parse_args()
    if a.smoke:
        a.limit, a.variants = 16, a.variants or SMOKE_VARIANTS
        a.override = [*a.override, "data.calib.num_samples=16", "calibrator.batch_size=8"]
    if not a.variants:
        ap.error("--variants is required (variants separated by ;)")
    s, model, splits, enc = _common.setup(a.model, *a.override)

    import numpy as np
    import onnx

    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner
    from quantkit.calibrate import activation_tensors, collect_stats, select_tensors
    from quantkit.backends.runners import calibration_runner
    from quantkit.calibrate.calibrators import make_calibrator
    from quantkit.calibrate.ranges import compute_ranges
    from quantkit.precision.plan import build_plan
    from quantkit.ptq.pipeline import CalibData, refine, rewrite
    from quantkit.settings.ptq_recipe import Recipe
    from quantkit.qdq.casts import emulate_fp16
    from quantkit.graph.facts import ensure_node_names
    from quantkit.qdq.insert import insert_qdq

    feeds = enc
    p, c = s.precision, s.calibrator
    def split_data(name):
        data = getattr(splits, name)
        if a.limit:
            data = data.subset(range(min(a.limit, len(data))), name)
        return data

    def evaluate(m, name, data):
        lengths = feeds.lengths(data) if hasattr(feeds, "lengths") else None
        with OrtRunner(m, name=name, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS,
                       qdq_mode="exact") as r:
            return run_split(r, feeds, data, output=model.output_name,
                             batch_size=s.backend.batch_size, progress=False, lengths=lengths)

    base = onnx.load(model.path)
    ensure_node_names(base)

    def reference(name):
        data = split_data(name)
        cache = (Path("/tmp/qk16") / f"ref.{a.model}.{Path(model.path).parent.name}."
                 f"{name}.{data.sha256[:12]}.npy")  # the prepared model's and the split's hash
        cache.parent.mkdir(parents=True, exist_ok=True)
        if cache.exists():
            ref = np.load(cache)
        else:
            ref = evaluate(base, "fp32", data)
            np.save(cache, ref)
        y = np.asarray(data.labels)
        print(f"fp32 acc={float((ref.argmax(1) == y).mean()):.4f} n={len(y)} split={name}",
              flush=True)
        return data, y, ref

    data, y, ref = reference(a.split)
    ref_pred = ref.argmax(1)
    acc_fp32 = float((ref_pred == y).mean())
    built: dict = {}
    rows: list = []
    cal_all = [f for _, f in feeds.batches(splits.calib, c.batch_size)]
    calibrated: dict = {}
    for spec in a.variants.split(";"):
        v = parse(spec)
        t0 = time.perf_counter()
        sq = float(v["sq"]) or None
        eq = v["eq"]
        opts = Recipe(smoothquant_alpha=sq,
                          equalization="off" if eq == "0" else "per_channel_clip",
                          equalization_alpha=None if eq in ("0", "w") else float(eq),
                          range_search=v["rs"] == "1", range_search_combine=v["comb"], range_search_error=v["err"],
                          range_search_grid=int(v["grid"]), bias_correction=v["bc"] == "1",
                          weight_rounding=v["wr"],
                          stream_alpha=float(v["st"]) if v["st"] != "0" else None)
        key = (sq, eq, v["st"])
        if key not in calibrated:
            rw = rewrite(base, opts, CalibData(batches=lambda: cal_all,
                                               subset=lambda: cal_all[:4]),
                         output=model.output_name)
            m, records = rw.model, list(rw.steps)
            tensors = activation_tensors(select_tensors(m, op_types=tuple(p.op_types)))
            res = collect_stats(m, cal_all, tensors, num_bins=c.num_bins, progress=False, runner_factory=calibration_runner)
            cals = {k: make_calibrator(k, **({"percentile": c.percentile}
                                             if k == "percentile" else {}))
                    for k in ("minmax", "percentile", "entropy", "mse")}
            calibrated[key] = (m, records, compute_ranges(res.stats, cals,
                                                          samples_seen=res.samples_seen))
        m, records, ranges = calibrated[key]
        r0 = ranges[v["cal"]]
        plan = build_plan(m, amax=r0.amax, excluded=r0.excluded, op_types=p.op_types,
                          include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                          remainder=v["rem"], calibrator=v["cal"], fp32_ops=p.fp32_ops)
        if v["only"]:
            keep = re.compile(v["only"])
            plan = plan.with_precision([n for n in plan.int8_nodes() if not keep.search(n)],
                                       v["rem"], "only")
        if v["drop"]:
            dropre = re.compile(v["drop"])
            plan = plan.with_precision([n for n in plan.int8_nodes() if dropre.search(n)],
                                       v["rem"], "drop")
        n = int(v["rsn"])
        sub = [f for _, f in feeds.batches(splits.calib.subset(
            range(min(n, len(splits.calib))), "calib"), c.batch_size)]
        refined = refine(m, plan, ranges, opts, CalibData(batches=lambda: cal_all,
                                                          subset=lambda: sub),
                         target=s.target)
        plan, mq, recs = refined.plan, refined.model, list(records) + list(refined.records)
        q, _ = insert_qdq(mq, plan, target=s.target, int8_weights=True)
        if v["rem"] == "fp16":
            q = emulate_fp16(q, plan)
        prep = time.perf_counter() - t0
        built[spec] = q
        logits = evaluate(q, spec, data)
        pred = logits.argmax(1)
        row = {"variant": spec, "split": a.split, "n": len(y), "int8": len(plan.int8_nodes()),
               "acc": round(float((pred == y).mean()), 4),
               "d_acc_pp": round(100 * (float((pred == y).mean()) - acc_fp32), 2),
               "agree": round(float((pred == ref_pred).mean()), 4),
               "flips": int((pred != ref_pred).sum()),
               "logit_nmse": float(np.mean((logits - ref) ** 2) / np.mean(ref ** 2)),
               "prep_s": round(prep, 1), "s": round(time.perf_counter() - t0, 1),
               "overrides": a.override}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if a.out:
            with open(a.out, "a") as fh:
                fh.write(json.dumps({**row, "steps": [r.to_dict() for r in recs]}) + "\n")

    if a.test_top and a.split == "dev":
        order = sorted(rows, key=lambda r: (-r["agree"], -r["acc"]))
        picked = list(dict.fromkeys([rows[0]["variant"]] +
                                    [r["variant"] for r in order[:a.test_top]]))
        tdata, ty, tref = reference("test")
        for spec in picked:
            pred = evaluate(built[spec], spec, tdata).argmax(1)
            tacc = float((pred == ty).mean())
            row = {"variant": spec, "split": "test", "n": len(ty), "acc": round(tacc, 4),
                   "d_acc_pp": round(100 * (tacc - float((tref.argmax(1) == ty).mean())), 2),
                   "agree": round(float((pred == tref.argmax(1)).mean()), 4),
                   "flips": int((pred != tref.argmax(1)).sum()),
                   "chosen_on_dev": spec != rows[0]["variant"] or spec in
                   [r["variant"] for r in order[:a.test_top]], "overrides": a.override}
            print(json.dumps(row), flush=True)
            if a.out:
                with open(a.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    best = max(rows, key=lambda r: (r["agree"], r["acc"]))
    print(f"model={a.model} split={a.split} n={len(y)} acc_fp32={acc_fp32:.4f} "
          f"variants={len(rows)} best_variant={best['variant']} best_agree={best['agree']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("ptq_variants", main))
