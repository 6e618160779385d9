"""Calibration cost: quantkit (all four calibrators, one pass) vs ONNX Runtime quantize_static.

Same model (bert_int8's MiniLM), same 256 calibration samples, same batches. Each side runs
in its own process so peak RSS is per side. Usage:

    python benchmarks/calibration.py [--samples 256]

Last line: calib_time_ratio=<quantkit/ort> calib_rss_ratio=<quantkit/ort> quantkit_rss_gb=<x>
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def child(side: str, samples: int, padding: str) -> dict:
    s, model, splits, enc = _common.setup("bert_int8", f"data.calib.num_samples={samples}")
    from quantkit.data.text import iter_feeds

    # Both sides get the same batches. ORT stacks every batch's activations, so it needs
    # one shape: batches padded to max_length (128). quantkit's own runs pad to the longest
    # text of each length-sorted batch ("dynamic"), measured as an extra row.
    pad_to = s.data.max_length if padding == "max_length" else None
    feeds = [f for _, f in iter_feeds(enc, splits.calib.texts, s.calibrator.batch_size, pad_to=pad_to)]
    rss_before = _common.peak_rss_gb()
    if side == "quantkit":
        import onnx

        from quantkit.calibrate import (activation_tensors, collect_stats, compute_ranges,
                                        make_calibrator, select_tensors)

        t0 = time.perf_counter()
        proto = onnx.load(model.path)
        tensors = activation_tensors(select_tensors(proto))
        res = collect_stats(proto, iter(feeds), tensors, progress=False)
        cals = {m: make_calibrator(m) for m in ("minmax", "percentile", "entropy", "mse")}
        ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen)
        seconds = time.perf_counter() - t0
        extra = {"calibrators": len(ranges), "tensors": len(tensors)}
    else:
        import peers

        with tempfile.TemporaryDirectory() as tmp:
            seconds = peers.ort_quantize(model.path, Path(tmp) / "ort.onnx", feeds,
                                         method="percentile", percentile=99.99)
        extra = {"calibrators": 1}
    return {"side": side, "padding": padding, "seconds": seconds,
            "peak_rss_gb": _common.peak_rss_gb(), "rss_before_gb": rss_before,
            "samples": samples, **extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--child", choices=["quantkit", "ort"])
    ap.add_argument("--padding", choices=["max_length", "dynamic"], default="max_length")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.samples, a.padding)))
        return
    _common.setup("bert_int8")  # prepare / warm the model cache outside the measured runs
    n = str(a.samples)
    q = _common.run_child(Path(__file__), "--child", "quantkit", "--samples", n)
    o = _common.run_child(Path(__file__), "--child", "ort", "--samples", n)
    qd = _common.run_child(Path(__file__), "--child", "quantkit", "--samples", n, "--padding", "dynamic")
    print(f"{a.samples} calibration samples, batch {_common.settings_for().calibrator.batch_size}, bert_int8 (MiniLM-L6, MatMul/Gemm scope)")
    print(f"{'side':<10} {'padding':<11} {'calibrators':>11} {'seconds':>8} {'peak RSS GB':>11}")
    for r in (q, o, qd):
        print(f"{r['side']:<10} {r['padding']:<11} {r['calibrators']:>11} {r['seconds']:>8.1f} "
              f"{r['peak_rss_gb']:>11.2f}")
    print("modelopt   not measured: nvidia-modelopt[onnx] pulls onnxruntime-gpu, which would "
          "replace the CPU onnxruntime this benchmark needs")
    print(f"calib_time_ratio={q['seconds'] / o['seconds']:.3f} "
          f"calib_rss_ratio={q['peak_rss_gb'] / o['peak_rss_gb']:.3f} "
          f"quantkit_rss_gb={q['peak_rss_gb']:.2f}")


if __name__ == "__main__":
    main()
