"""Full-INT8 accuracy: quantkit's best calibrator vs ONNX Runtime quantize_static (TensorRT style).

Same model, same eval split, same calibration samples, one run. The ORT peer uses QDQ,
signed symmetric INT8 activations and weights, per-channel weights, the weighted-op scope of
the model (MatMul/Gemm for MiniLM, Conv/Gemm for MobileNetV2) and the best of MinMax /
Percentile 99.99 / Entropy (2048 bins). NVIDIA ModelOpt is measured where it imports (not
here: it pulls onnxruntime-gpu). quantkit's candidates are evaluated exactly as a run does
(same stage-cache keys: after a run of the experiment they are read back, not recomputed).
Usage:

    python benchmarks/accuracy_vs_peers.py [--eval-limit N]
    python benchmarks/accuracy_vs_peers.py --model mobilenet_int8   # or: model=mobilenet_int8

Last line: acc_fp32=<a> acc_quantkit=<b> acc_ort=<c> acc_modelopt=<d|na>
(prefixed ``model=<experiment> `` for models other than the default bert_int8)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--model", default="bert_int8", choices=["bert_int8", "mobilenet_int8"],
                    help="the experiment whose model and data are measured")
    a = ap.parse_args([f"--model={x.split('=', 1)[1]}" if x.startswith("model=") else x
                       for x in sys.argv[1:]])
    overrides = [f"data.eval.limit={a.eval_limit}"] if a.eval_limit else []
    s, model, splits, enc = _common.setup(a.model, *overrides)
    text = s.data.kind == "text"

    import numpy as np

    import peers
    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import OrtRunner
    from quantkit.data.feeds import as_feeds
    from quantkit.run import (build_artifact, calibrate, check_fp16_range, evaluate_artifact,
                              evaluate_reference, plan_for_ranges, prepared_context, quant_scope)

    enc = as_feeds(enc)
    lengths = enc.lengths(splits.eval)
    y = splits.eval.labels
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the run's own stages and stage cache: evaluations a run of this experiment made
        # are read back
        ctx = prepared_context(s, tmp)
        ref = evaluate_reference(ctx)
        acc_fp32 = ref.metric("accuracy")
        rows.append(("fp32", "-", acc_fp32))
        cal = calibrate(ctx, quant_scope(ctx))
        overflow = check_fp16_range(ctx)
        qk = {}
        for method, rng in cal.ranges.items():
            art = build_artifact(ctx, f"int8.{method}", plan_for_ranges(ctx, rng, overflow),
                                 nonfinite=rng.excluded)
            # as a quantkit run evaluates it: FP16 remainder on a faithful FP16 emulation
            qk[method] = evaluate_artifact(ctx, art, ref).metric("accuracy")
            rows.append(("quantkit", f"{method} (INT8 + FP16 remainder, emulated)", qk[method]))
        # ORT stacks its calibration batches: text batches padded to max_length (images
        # have one shape already)
        kw = {"pad_to": s.data.max_length} if text else {}
        feeds = [f for _, f in enc.batches(splits.calib, s.calibrator.batch_size, **kw)]
        scope = ("MatMul", "Gemm") if text else ("Conv", "Gemm")
        ort = {}
        for method in ("minmax", "percentile", "entropy"):
            out = tmp / f"ort.{method}.onnx"
            peers.ort_quantize(model.path, out, feeds, method=method, percentile=99.99,
                               op_types=scope)
            with OrtRunner(out, name=f"ort-{method}") as r:
                logits = run_split(r, enc, splits.eval, output=model.output_name,
                                   batch_size=s.backend.batch_size, progress=False, lengths=lengths)
            ort[method] = float((logits.argmax(1) == y).mean())
            rows.append(("ort", f"{method} (quantize_static QDQ, {'/'.join(scope)}, FP32 rest)",
                         ort[method]))
    acc_mo = "na"
    print(f"eval examples: {len(y)}; calibration samples: {len(splits.calib)}")
    print(f"{'tool':<10} {'configuration':<44} {'accuracy':>8}")
    for tool, conf, acc in rows:
        print(f"{tool:<10} {conf:<44} {acc:>8.4f}")
    if not peers.modelopt_available():
        print("modelopt   not measured: nvidia-modelopt[onnx] pulls onnxruntime-gpu, which "
              "rounds fp16 QuantizeLinear toward zero here")
    best_q, best_o = max(qk.values()), max(ort.values())
    print(f"best quantkit calibrator: {max(qk, key=qk.get)}; best ORT method: {max(ort, key=ort.get)}")
    prefix = "" if a.model == "bert_int8" else f"model={a.model} "
    print(f"{prefix}acc_fp32={acc_fp32:.4f} acc_quantkit={best_q:.4f} acc_ort={best_o:.4f} "
          f"acc_modelopt={acc_mo}")
    _ = np


if __name__ == "__main__":
    main()
