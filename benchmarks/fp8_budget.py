"""Where a full-FP8 candidate's error comes from: FP8 weights alone, FP8 activations alone
(the attention BMMs' and the weighted GEMMs' apart), and both, on the dev (or test) split.

    python benchmarks/fp8_budget.py --model bert_int8 [--split dev] [--limit N]
    python benchmarks/fp8_budget.py --smoke    # 16 examples, the rows without GPTQ

The last line sums the rows up: ``model=<m> split=<split> n=<n> fp8_nodes=<k> acc_fp32=<a>
worst_row=<row> worst_agree=<agreement of the row furthest from FP32> rows=<rows run>``.

The FP8 plan is the run's ``fp8.minmax`` one on the original graph at opset 19
(``run/fp8_source.fp8_plan``: FP8 E4M3 where TensorRT runs FP8, amax / 448 per tensor), its
ranges from the calibration split. Rows (each one line of JSON: agreement and flips vs
FP32's top-1, accuracy, mean KL vs FP32, logit NMSE):

- ``fp16``: no FP8 node, the FP16 remainder emulated (the floor of the rest);
- ``weights_nearest`` / ``weights_gptq``: the FP32 graph with its FP8 nodes' weights on the
  E4M3 grid (round to nearest / ``ptq.weight_rounding.round_weights(grid="fp8")``, the
  candidates' GPTQ), no Q/DQ, activations FP32;
- ``act_bmm`` / ``act_gemm`` / ``act_all``: FP8 Q/DQ on the activations of the attention
  BMMs (no constant weight), of the weighted GEMMs, of both; weights FP32; FP16 remainder;
- ``full_nearest`` / ``full_gptq``: the full-FP8 candidate as a run builds it.

Exact Q/DQ numerics on ONNX Runtime CPU (``session.disable_quant_qdq``). Overrides after
``--override`` go to the experiment (``gpu.sm=90 precision.formats=[int8,fp8]`` are set).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

#: --smoke: the smallest real run (every row; a handful of examples)
SMOKE = ("data.calib.num_samples=16", "calibrator.batch_size=8")
ROWS = ("fp16", "weights_nearest", "weights_gptq", "act_bmm", "act_gemm", "act_all",
        "full_nearest", "full_gptq")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert_int8")
    ap.add_argument("--split", default="dev", choices=["dev", "test"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of rows")
    ap.add_argument("--override", action="append", default=[])
    _common.bench_args(ap, "every row but the two GPTQ ones on 16 dev examples, 16 "
                           "calibration samples")
    a = ap.parse_args()
    if a.smoke:  # the GPTQ rows' rounding alone takes most of a minute on MiniLM
        a.limit, a.rows = 16, ",".join(r for r in ROWS if not r.endswith("_gptq"))
        a.override = [*a.override, *SMOKE]
    rows = a.rows.split(",")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        raise SystemExit(f"unknown rows {unknown}: expected some of {', '.join(ROWS)}")
    s, model, splits, feeds = _common.setup(a.model, "gpu.sm=90", "precision.formats=[int8,fp8]",
                                            *a.override)

    import numpy as np
    import onnx

    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner
    from quantkit.backends.runners import calibration_runner
    from quantkit.calibrate import (activation_tensors, collect_stats, compute_ranges,
                                    make_calibrator, select_tensors)
    from quantkit.compare.task import mean_kl
    from quantkit.graph.facts import ensure_node_names
    from quantkit.precision.plan import Precision, build_plan
    from quantkit.ptq.graphutil import InitializerEditor, copy_model
    from quantkit.ptq.weight_rounding import input_hessians, round_weights, rounding_layers
    from quantkit.qdq.casts import emulate_fp16, to_opset
    from quantkit.qdq.fp8 import FP8_OPSET, fake_quantize_fp8, fp8_weight_scale
    from quantkit.qdq.insert import insert_qdq
    from quantkit.run.fp8_source import fp8_plan

    p, c = s.precision, s.calibrator
    base = onnx.load(model.path)
    ensure_node_names(base)
    m19 = to_opset(base, FP8_OPSET, why="FP8 Q/DQ")
    data = getattr(splits, a.split)
    if a.limit:
        data = data.subset(range(min(a.limit, len(data))), a.split)
    calib = [f for _, f in feeds.batches(splits.calib, c.batch_size)]

    def evaluate(m, name):
        lengths = feeds.lengths(data) if hasattr(feeds, "lengths") else None
        with OrtRunner(m, name=name, disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS,
                       qdq_mode="exact") as r:
            return run_split(r, feeds, data, output=model.output_name,
                             batch_size=s.backend.batch_size, progress=False, lengths=lengths)

    ref = evaluate(base, "fp32")
    ref_pred, y = ref.argmax(1), np.asarray(data.labels)
    tensors = activation_tensors(select_tensors(m19, op_types=tuple(p.op_types)))
    res = collect_stats(m19, calib, tensors, num_bins=c.num_bins, progress=False,
                        runner_factory=calibration_runner)
    rng = compute_ranges(res.stats, {"fp8.minmax": make_calibrator("minmax", grid="fp8")},
                         samples_seen=res.samples_seen)["fp8.minmax"]
    plan = fp8_plan(build_plan(m19, amax=rng.amax, excluded=rng.excluded, op_types=p.op_types,
                               include_nodes=p.include_nodes, exclude_nodes=p.exclude_nodes,
                               remainder=p.remainder, calibrator="fp8.minmax",
                               fp32_ops=p.fp32_ops),
                    "fp8.minmax", m19, p.remainder)
    fp8 = sorted(plan.nodes_with(Precision.FP8))
    layers, _ = rounding_layers(m19, fp8)
    weighted = {l.node for l in layers}
    bmm = [n for n in fp8 if n not in weighted]
    originals = {i.name: i for i in m19.graph.initializer}
    by_name = {n.name: n for n in m19.graph.node}
    gptq = None

    def gptq_model():
        nonlocal gptq
        if gptq is None:
            gptq = round_weights(m19, layers, input_hessians(m19, calib, layers), grid="fp8")[0]
        return gptq

    def nearest_model():
        m = copy_model(m19)
        ed = InitializerEditor(m)
        nodes = {n.name: n for n in m.graph.node}
        for l in layers:
            w = ed.array(l.weight)
            ed.replace(nodes[l.node], 1,
                       fake_quantize_fp8(w, fp8_weight_scale(w)).astype(w.dtype))
        return m

    def qdq(m, pl):
        q, _ = insert_qdq(m, pl, target=s.target, int8_weights=True)
        return emulate_fp16(q, pl) if p.remainder == "fp16" else q

    def fp32_weights(q):
        """``q`` with each weighted FP8 node reading its original FP32 weight (no weight DQ)."""
        q = copy_model(q)
        have = {i.name for i in q.graph.initializer}
        for n in q.graph.node:
            if n.name in weighted:
                w = by_name[n.name].input[1]
                n.input[1] = w
                if w not in have:
                    q.graph.initializer.append(originals[w])
                    have.add(w)
        return q

    def build(row):
        if row == "fp16":
            return qdq(m19, plan.with_precision(fp8, "fp16", "fp8_budget: no FP8"))
        if row == "weights_nearest":
            return nearest_model()
        if row == "weights_gptq":
            return gptq_model()
        if row.startswith("act_"):
            keep = {"act_bmm": set(bmm), "act_gemm": weighted, "act_all": set(fp8)}[row]
            pl = plan.with_precision([n for n in fp8 if n not in keep], "fp16",
                                     "fp8_budget: not in this row")
            return fp32_weights(qdq(m19, pl))
        return qdq(gptq_model() if row == "full_gptq" else m19, plan)

    print(json.dumps({"model": a.model, "split": a.split, "n": len(y), "fp8_nodes": len(fp8),
                      "weighted": len(weighted), "bmm": len(bmm),
                      "acc_fp32": round(float((ref_pred == y).mean()), 4)}), flush=True)
    agree = {}
    for row in rows:
        t0 = time.perf_counter()
        logits = evaluate(build(row), row)
        pred = logits.argmax(1)
        agree[row] = float((pred == ref_pred).mean())
        print(json.dumps({
            "row": row, "agree": round(agree[row], 4),
            "flips": int((pred != ref_pred).sum()), "acc": round(float((pred == y).mean()), 4),
            "mean_kl": float(f"{mean_kl(ref, logits):.4g}"),
            "logit_nmse": float(f"{np.mean((logits - ref) ** 2) / np.mean(ref ** 2):.4g}"),
            "s": round(time.perf_counter() - t0, 1)}), flush=True)
    worst = min(agree, key=agree.get)
    print(f"model={a.model} split={a.split} n={len(y)} fp8_nodes={len(fp8)} "
          f"acc_fp32={float((ref_pred == y).mean()):.4f} worst_row={worst} "
          f"worst_agree={agree[worst]:.4f} rows={len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("fp8_budget", main))
