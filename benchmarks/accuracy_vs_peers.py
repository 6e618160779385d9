"""Full-INT8 accuracy: quantkit's best calibrator vs ONNX Runtime quantize_static (TensorRT style).

Same model, same eval split, same 256 calibration samples, one run. The ORT peer uses QDQ,
signed symmetric INT8 activations and weights, per-channel weights, MatMul/Gemm scope and
the best of MinMax / Percentile 99.99 / Entropy (2048 bins). NVIDIA ModelOpt is measured where
it imports (not here: it pulls onnxruntime-gpu). Usage:

    python benchmarks/accuracy_vs_peers.py [--eval-limit N]

Last line: acc_fp32=<a> acc_quantkit=<b> acc_ort=<c> acc_modelopt=<d|na>
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
    a = ap.parse_args()
    overrides = [f"data.eval.limit={a.eval_limit}"] if a.eval_limit else []
    s, model, splits, enc = _common.setup("bert_int8", *overrides)

    import numpy as np
    import onnx

    import peers
    from quantkit.app import build_artifact, calibrate, evaluate_candidate, fp16_overflow
    from quantkit.backends.batched import run_split
    from quantkit.backends.ort import OrtRunner
    from quantkit.data.text import iter_feeds
    from quantkit.qdq.graph import ensure_node_names

    lengths = enc.lengths(splits.eval.texts)
    y = splits.eval.labels
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ref = evaluate_candidate(s, "fp32", model.path, model, splits, enc, lengths)
        acc_fp32 = ref["evidence"]["metrics"]["accuracy"]
        rows.append(("fp32", "-", acc_fp32))
        proto = onnx.load(model.path)
        ensure_node_names(proto)
        cal = calibrate(s, proto, splits, enc, tmp)
        overflow = fp16_overflow(s, proto, splits, enc)
        qk = {}
        for method, rng in cal["ranges"].items():
            art = build_artifact(s, proto, tmp, f"int8.{method}", ranges=rng, overflow=overflow)
            # as a quantkit run evaluates it: FP16 remainder on a faithful FP16 emulation
            res = evaluate_candidate(s, f"int8.{method}", art["path"], model, splits, enc, lengths,
                                     emulated=art["emulated"])
            qk[method] = res["evidence"]["metrics"]["accuracy"]
            rows.append(("quantkit", f"{method} (INT8 + FP16 remainder, emulated)", qk[method]))
        feeds = [f for _, f in iter_feeds(enc, splits.calib.texts, s.calibrator.batch_size,
                                              pad_to=s.data.max_length)]
        ort = {}
        for method in ("minmax", "percentile", "entropy"):
            out = tmp / f"ort.{method}.onnx"
            peers.ort_quantize(model.path, out, feeds, method=method, percentile=99.99)
            with OrtRunner(out, name=f"ort-{method}") as r:
                logits = run_split(r, enc, splits.eval.texts, output=model.output_name,
                                   batch_size=s.backend.batch_size, progress=False, lengths=lengths)
            ort[method] = float((logits.argmax(1) == y).mean())
            rows.append(("ort", f"{method} (quantize_static QDQ, FP32 remainder)", ort[method]))
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
    print(f"acc_fp32={acc_fp32:.4f} acc_quantkit={best_q:.4f} acc_ort={best_o:.4f} "
          f"acc_modelopt={acc_mo}")
    _ = np


if __name__ == "__main__":
    main()
