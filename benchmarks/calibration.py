"""Calibration cost: quantkit (all four calibrators, one pass) vs ONNX Runtime quantize_static.

Same model (bert_int8's MiniLM, or mobilenet_int8's MobileNetV2), same 256 calibration
samples, same batches, the same tensors a run calibrates. Each side runs in its own process
so peak RSS is per side. Usage:

    python benchmarks/calibration.py [--samples 256]
    python benchmarks/calibration.py --model mobilenet_int8   # or: model=mobilenet_int8
    python benchmarks/calibration.py --smoke                  # 8 samples, no dynamic row

Last line: calib_time_ratio=<quantkit/ort> calib_rss_ratio=<quantkit/ort> quantkit_rss_gb=<x>
(prefixed ``model=<experiment> `` for models other than the default bert_int8)
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


def child(side: str, samples: int, padding: str, experiment: str = "bert_int8") -> dict:
    s, model, splits, enc = _common.setup(experiment, f"data.calib.num_samples={samples}")

    # Both sides get the same batches. ORT stacks every batch's activations, so it needs
    # one shape: text batches padded to max_length (128). quantkit's own runs pad to the
    # longest text of each length-sorted batch ("dynamic"), measured as an extra row.
    # Images have one shape already ("none").
    kw = {"pad_to": s.data.max_length if padding == "max_length" else None} \
        if enc.kind == "text" else {}
    feeds = [f for _, f in enc.batches(splits.calib, s.calibrator.batch_size, **kw)]
    rss_before = _common.peak_rss_gb()
    if side == "quantkit":
        import onnx

        from quantkit.backends.runners import calibration_runner
        from quantkit.calibrate import collect_stats, compute_ranges, make_calibrator

        from quantkit.graph.model_graph import ModelGraph
        from quantkit.run.context import RunContext
        from quantkit.run.scope import quant_scope

        t0 = time.perf_counter()
        proto = onnx.load(model.path)
        graph = ModelGraph.build(proto)
        # as a run does: the run's QuantScope, incl. the skip inputs of residual Adds after
        # INT8 Convs (TRT rule 6)
        tensors = list(quant_scope(RunContext(settings=s, run_dir=Path("."), cache_dir=Path("."),
                                              graph=graph)).tensors)
        res = collect_stats(proto, iter(feeds), tensors, progress=False, runner_factory=calibration_runner)
        cals = {m: make_calibrator(m) for m in ("minmax", "percentile", "entropy", "mse")}
        ranges = compute_ranges(res.stats, cals, samples_seen=res.samples_seen)
        seconds = time.perf_counter() - t0
        extra = {"calibrators": len(ranges), "tensors": len(tensors)}
    else:
        import peers

        with tempfile.TemporaryDirectory() as tmp:
            seconds = peers.ort_quantize(model.path, Path(tmp) / "ort.onnx", feeds,
                                         method="percentile", percentile=99.99,
                                         op_types=("MatMul", "Gemm") if enc.kind == "text"
                                         else ("Conv", "Gemm"))
        extra = {"calibrators": 1}
    return {"side": side, "padding": padding if enc.kind == "text" else "none", "seconds": seconds,
            "peak_rss_gb": _common.peak_rss_gb(), "rss_before_gb": rss_before,
            "samples": samples, **extra}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--child", choices=["quantkit", "ort"])
    ap.add_argument("--padding", choices=["max_length", "dynamic"], default="max_length")
    ap.add_argument("--model", default="bert_int8", choices=["bert_int8", "mobilenet_int8"],
                    help="the experiment whose model and calibration data are measured")
    _common.bench_args(ap, "8 calibration samples, both sides, text padded to max_length only")
    a = ap.parse_args([f"--model={x.split('=', 1)[1]}" if x.startswith("model=") else x
                       for x in sys.argv[1:]])
    if a.smoke:
        a.samples = 8
    if a.child:
        print(json.dumps(child(a.child, a.samples, a.padding, a.model)))
        return 0
    if not a.smoke:  # prepare / warm the model cache outside the measured runs (each child
        _common.setup(a.model)  # prepares it too, before its measurement starts)
    n, m = str(a.samples), f"--model={a.model}"
    text = a.model == "bert_int8"
    q = _common.run_child(Path(__file__), "--child", "quantkit", "--samples", n, m)
    o = _common.run_child(Path(__file__), "--child", "ort", "--samples", n, m)
    rows = [q, o]
    if text and not a.smoke:  # the padding a run uses (the smoke run: max_length only)
        rows.append(_common.run_child(Path(__file__), "--child", "quantkit", "--samples", n,
                                      "--padding", "dynamic", m))
    what = "bert_int8 (MiniLM-L6, MatMul/Gemm scope)" if text else \
        f"{a.model} (MobileNetV2, Conv/Gemm scope, {q['tensors']} tensors incl. residual Add inputs)"
    print(f"{a.samples} calibration samples, batch "
          f"{_common.settings_for(a.model).calibrator.batch_size}, {what}")
    print(f"{'side':<10} {'padding':<11} {'calibrators':>11} {'seconds':>8} {'peak RSS GB':>11}")
    for r in rows:
        print(f"{r['side']:<10} {r['padding']:<11} {r['calibrators']:>11} {r['seconds']:>8.1f} "
              f"{r['peak_rss_gb']:>11.2f}")
    print("modelopt   not measured: nvidia-modelopt[onnx] pulls onnxruntime-gpu, which would "
          "replace the CPU onnxruntime this benchmark needs")
    prefix = "" if text else f"model={a.model} "
    print(f"{prefix}calib_time_ratio={q['seconds'] / o['seconds']:.3f} "
          f"calib_rss_ratio={q['peak_rss_gb'] / o['peak_rss_gb']:.3f} "
          f"quantkit_rss_gb={q['peak_rss_gb']:.2f}")
    return 0


if __name__ == "__main__":  # a --child prints its JSON line only: no results file
    sys.exit(main() if "--child" in sys.argv else _common.run_benchmark("calibration", main))
