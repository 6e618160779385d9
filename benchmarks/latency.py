"""Throughput on ONNX Runtime CPU: FP32 vs quantkit INT8 (target=ort_cpu and target=tensorrt)
vs ONNX Runtime quantize_static's TensorRT-style model, interleaved in one run.

All models come from the same prepared FP32 model; both quantkit artifacts from the
same calibration (the run's ptq and calibration stages with ``ptq.recipe=none``: no
SmoothQuant / equalization rewrite, so quantize_static below quantizes the same graph; one
calibrator, default mse; the tensor set of target=ort_cpu, a superset of tensorrt's: it adds
the Conv / residual-Add outputs that target quantizes, and every tensor's range is computed on
its own) and the same Plan, realized per target (quantkit/qdq/targets.py). ONNX Runtime's
own uint8 QDQ model (quantize_static defaults: uint8 activations, per-channel int8 weights,
MinMax, every op it can quantize) is timed as the reference for target=ort_cpu. The two
TensorRT-style models are compared fairly: both have an FP32 remainder (precision.remainder=fp32; quantize_static leaves the rest FP32) and the same
INT8 op scope (quantize_static's nodes_to_quantize = quantkit's INT8 nodes), symmetric int8
activations and per-channel int8 weights in QDQ format. The CPU numbers of the TensorRT-style
models say nothing about TensorRT latency: they only show how ONNX Runtime runs such graphs.

Timing: one session per model with the same options (intra-op threads fixed, sequential
execution, the run's disabled optimizers); warm-up calls, then interleaved rounds
A B C D A B C D ...; medians. Usage:

    python benchmarks/latency.py [model=bert_int8|mobilenet_int8] [--rounds 7] [--threads 1]
    python benchmarks/latency.py --smoke    # 16 calibration samples, 32 tokens, 1 round

The full run writes benchmarks/results/latency.md (``--results-dir``: elsewhere).

Last line (throughput ratios; x, y: ort_cpu target over FP32; z: quantkit target=tensorrt
over quantize_static; c: fraction of the ort_cpu target's INT8 nodes ONNX Runtime ran as
INT8 kernels; u: ONNX Runtime's own uint8 model over FP32, the reference for y):

    [model=mobilenet_int8 ]int8_vs_fp32_b1=<x> int8_vs_fp32_b32=<y> trt_style_vs_ortquant_b32=<z> int8_kernel_coverage=<c> ortquant_u8_vs_fp32_b32=<u>
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

EXPERIMENTS = ("bert_int8", "mobilenet_int8")
#: --smoke: the smallest real run (the same stages on a handful of examples)
SMOKE = ("data.calib.num_samples=16", "data.dev.limit=32", "data.test.limit=32",
         "calibrator.batch_size=8")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="model=bert_int8 (default) | model=mobilenet_int8")
    ap.add_argument("--calibrator", default="mse", help="calibrator of the quantkit artifacts")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up calls per model and batch")
    ap.add_argument("--repeat-b1", type=int, default=8, help="batch-1 calls per round and model")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    ap.add_argument("--seq-len", type=int, default=128, help="text: tokens per example (padded)")
    _common.bench_args(ap, "bert_int8 on 16 calibration samples and 32 dev examples, 32 "
                           "tokens, one timing round of one call, no warm-up")
    a = ap.parse_args(argv)
    if a.smoke:
        a.rounds, a.warmup, a.repeat_b1, a.seq_len = 1, 0, 1, 32
    a.model = "bert_int8"
    for o in a.overrides:
        key, _, value = o.partition("=")
        if key != "model" or not value:
            ap.error(f"unknown argument {o!r}; use model=<{'|'.join(EXPERIMENTS)}>")
        a.model = value
    if a.model not in EXPERIMENTS:
        ap.error(f"model={a.model} is not one of {list(EXPERIMENTS)}")
    if not (_common.ROOT / "conf" / "experiment" / f"{a.model}.yaml").exists():
        ap.error(f"model={a.model}: conf/experiment/{a.model}.yaml does not exist in this "
                 "checkout (the experiment is not there yet); run with model=bert_int8")
    return a


def feeds_for(settings, feeds, splits, *, seq_len: int):
    """(make_batch(n) -> feed of the first n eval examples, calib feeds, describe str) from the
    run's feeds (``ctx.feeds``): text padded to ``seq_len`` tokens, images as preprocessed."""
    if settings.data.kind == "text":
        enc, texts = feeds.encoder, splits.eval.texts

        def make_batch(n):
            return enc.encode(list(texts[:n]), pad_to=seq_len)

        calib = [f for _, f in feeds.batches(splits.calib, settings.calibrator.batch_size,
                                             pad_to=seq_len)]
        return make_batch, calib, f"real eval snippets padded to {seq_len} tokens"

    def make_batch(n):
        return next(iter(feeds.feeds(splits.eval.subset(range(n)), n)))

    calib = list(feeds.feeds(splits.calib, settings.calibrator.batch_size))
    desc = getattr(feeds, "describe", lambda: {})()
    return make_batch, calib, f"real eval images {desc}"


def ort_quantize_uint8(model_path, out_path, feeds: list[dict]) -> None:
    """ONNX Runtime's own CPU recipe: quantize_static with its defaults for x86 (QDQ, uint8
    activations, per-channel int8 weights, MinMax, every op type it quantizes)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    import peers

    quantize_static(str(model_path), str(out_path), peers.feed_reader(feeds), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)


def main(argv=None) -> None:
    a = parse_args(argv)
    # both TensorRT-style models: FP32 remainder; no ptq rewrite (quantize_static gets the
    # same graph and the same INT8 nodes)
    overrides = ["precision.remainder=fp32", "ptq.recipe=none"]
    if a.smoke:
        overrides += SMOKE
    s_trt = _common.settings_for(a.model, *overrides)
    s_ort = _common.settings_for(a.model, *overrides, "target=ort_cpu")

    import dataclasses

    import onnx

    import peers
    from quantkit.backends.ort import OrtRunner
    from quantkit.app import prepared_context
    from quantkit.run.artifact import build_artifact
    from quantkit.run.plans import plan_for_ranges
    from quantkit.run.scope import quant_scope
    from quantkit.run.stages.calibration import calibration
    from quantkit.run.stages.fp16_range_check import fp16_range_check
    from quantkit.run.stages.fp32_reference import fp32_reference
    from quantkit.run.stages.ptq import ptq

    ropts = dict(disabled_optimizers=s_trt.backend.disabled_optimizers,
                 intra_op_threads=a.threads, providers=s_trt.backend.providers)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # the run's own preparation (data, model, feeds, ModelGraph) and stage cache
        ctx = prepared_context(s_ort, tmp)
        model, splits, proto = ctx.model, ctx.splits, ctx.graph.model  # nodes named
        make_batch, calib_feeds, feed_desc = feeds_for(s_trt, ctx.feeds, splits,
                                                       seq_len=a.seq_len)
        # the run's stages; ort_cpu's tensor set: a superset of tensorrt's
        sources = ptq(ctx, quant_scope(ctx), fp16_range_check(ctx), fp32_reference(ctx, "dev"))
        cal = calibration(ctx, sources)
        if a.calibrator not in cal.ranges:
            raise SystemExit(f"--calibrator {a.calibrator}: not one of {list(cal.ranges)}")
        rng = cal.ranges[a.calibrator]
        arts = {}
        for tgt, s in (("ort_cpu", s_ort), ("tensorrt", s_trt)):
            d = tmp / tgt
            d.mkdir()
            tctx = dataclasses.replace(ctx, settings=s, run_dir=d)
            arts[tgt] = build_artifact(tctx, f"int8.{a.calibrator}",
                                       plan_for_ranges(tctx, rng, None), nonfinite=rng.excluded)
        int8_nodes = arts["tensorrt"].plan.int8_nodes()
        assert int8_nodes == arts["ort_cpu"].plan.int8_nodes(), "one Plan for both targets"
        named = tmp / "fp32.named.onnx"
        onnx.save(proto, str(named))
        ortq = tmp / "ort_quantize_static.onnx"
        peers.ort_quantize(named, ortq, calib_feeds, method="minmax",
                           op_types=tuple(s_trt.precision.op_types), nodes_to_quantize=int8_nodes)
        ortq_u8 = tmp / "ort_quantize_static_u8.onnx"
        ort_quantize_uint8(named, ortq_u8, calib_feeds)
        paths = {"fp32": model.path, "quantkit.ort_cpu": arts["ort_cpu"].path,
                 "quantkit.tensorrt": arts["tensorrt"].path, "ort.quantize_static": ortq,
                 "ort.quantize_static.u8": ortq_u8}
        coverage = {}
        for name, path in paths.items():
            if name == "fp32":
                continue
            opt = tmp / f"{name}.optimized.onnx"
            with OrtRunner(path, name=name, save_optimized_to=opt, **ropts):
                pass
            coverage[name] = _common.int8_kernel_coverage(opt, int8_nodes)

        feeds = {1: make_batch(1), 32: make_batch(32)}
        results: dict[int, dict[str, list[float]]] = {}
        import contextlib

        with contextlib.ExitStack() as stack:
            runners = {n: stack.enter_context(OrtRunner(p, name=n, **ropts))
                       for n, p in paths.items()}
            for b, feed in feeds.items():
                calls = {n: (lambda r=r, f=feed: r.infer(f)) for n, r in runners.items()}
                results[b] = _common.interleaved_latency(
                    calls, rounds=a.rounds, warmup=a.warmup, repeat=a.repeat_b1 if b == 1 else 1)

    import onnxruntime

    med = {b: {n: _common.median(v) for n, v in r.items()} for b, r in results.items()}
    thr = {b: {n: b / m for n, m in r.items()} for b, r in med.items()}
    print(f"model: {a.model} ({model.path}); inputs: {feed_desc}; batches 1 and 32")
    print(f"ONNX Runtime {onnxruntime.__version__} CPUExecutionProvider, intra-op threads "
          f"{a.threads}, sequential; disabled optimizers: "
          f"{','.join(s_trt.backend.disabled_optimizers) or 'none'}; interleaved rounds "
          f"{a.rounds} (batch 1: {a.repeat_b1} calls per round), warm-up {a.warmup}; medians")
    print(f"quantkit artifacts: calibrator {a.calibrator}, {len(int8_nodes)} INT8 nodes "
          f"(same Plan, both targets), remainder FP32; quantize_static: QDQ, symmetric int8 "
          f"activations + per-channel int8 weights, MinMax, same {len(int8_nodes)} nodes, "
          f"FP32 remainder; quantize_static.u8: ONNX Runtime's defaults (uint8 activations, "
          f"per-channel int8 weights, MinMax, every op type)")
    print("All numbers are ONNX Runtime CPU numbers. The TensorRT-style rows show how ORT CPU "
          "runs a TensorRT graph, not TensorRT latency.")
    print(f"{'model':<22} {'b1 ms':>9} {'b1 /s':>8} {'b32 ms':>9} {'b32 /s':>8}  int8 kernels "
          "(of quantized nodes)")
    for n in paths:
        cov = coverage.get(n)
        c = (f"{cov['covered']}/{cov['total']} {cov['kernels']}" if cov else "-")
        print(f"{n:<22} {1000 * med[1][n]:>9.2f} {thr[1][n]:>8.1f} {1000 * med[32][n]:>9.1f} "
              f"{thr[32][n]:>8.1f}  {c}")
    for n, cov in coverage.items():
        if cov["not_fused"]:
            print(f"{n}: not fused into INT8 kernels: {', '.join(cov['not_fused'][:12])}"
                  + (" ..." if len(cov["not_fused"]) > 12 else ""))
    x = thr[1]["quantkit.ort_cpu"] / thr[1]["fp32"]
    y = thr[32]["quantkit.ort_cpu"] / thr[32]["fp32"]
    z = thr[32]["quantkit.tensorrt"] / thr[32]["ort.quantize_static"]
    c = coverage["quantkit.ort_cpu"]["fraction"]
    u = thr[32]["ort.quantize_static.u8"] / thr[32]["fp32"]
    print("int8_vs_fp32_*: throughput of quantkit target=ort_cpu over FP32; "
          "trt_style_vs_ortquant_b32: quantkit target=tensorrt over quantize_static (both FP32 "
          "remainder); int8_kernel_coverage: target=ort_cpu; ortquant_u8_vs_fp32_b32: "
          "ONNX Runtime's own uint8 model over FP32")
    prefix = "" if a.model == "bert_int8" else f"model={a.model} "
    print(f"{prefix}int8_vs_fp32_b1={x:.2f} int8_vs_fp32_b32={y:.2f} "
          f"trt_style_vs_ortquant_b32={z:.2f} int8_kernel_coverage={c:.2f} "
          f"ortquant_u8_vs_fp32_b32={u:.2f}")


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("latency", main))
