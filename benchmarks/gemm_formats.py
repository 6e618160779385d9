"""GEMM throughput per format on one GPU: FP16, INT8 and FP8 E4M3, for quantkit's cost table.

Run on a CUDA machine with torch (no TensorRT needed)::

    python benchmarks/gemm_formats.py --out gemm_formats.json
    python benchmarks/gemm_formats.py --smoke   # the two small shapes, 3 repeats

Without CUDA, ``--smoke`` prints one line, ``skipped: ...``, and exits 0; a full run exits 2.

For each shape M x K x N (M tokens / rows, K reduction, N output features) it times
``torch.matmul`` on FP16, ``torch._int_mm`` on INT8 (int32 output) and ``torch._scaled_mm``
on FP8 E4M3 with per-tensor float32 scales (FP16 output): warm-up, then ``--repeats`` timed
runs of ``--inner`` back-to-back calls each between CUDA events; the figure is the median
of the repeats. Prints one JSON line per shape and the summary line ``sm=<sm> shapes=<n>
int8_vs_fp16_max=<x> fp8_vs_fp16_max=<y>`` (the best speed-up over FP16 of any shape; na
where the format did not run); ``--out`` writes JSON: the device, torch / CUDA versions and
per shape and format the median ms and TFLOP/s (2*M*K*N flops per GEMM) and the ratio to
FP16.

These are cuBLASLt figures through torch, not TensorRT kernels: research numbers for the cost
table (``quantkit/precision/cost_table.py`` cites them), not a latency of any model.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SHAPES = ((4096, 768, 768), (4096, 768, 3072), (32768, 3072, 768), (8192, 8192, 8192),
          (512, 768, 768), (128, 768, 768))


def _time_ms(torch, fn, *, warmup: int, repeats: int, inner: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def _gemms(torch, m: int, k: int, n: int) -> dict:
    """format -> zero-argument callable running one M x K x N GEMM in that format."""
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    a16 = torch.randn(m, k, device=dev, dtype=torch.float16, generator=gen)
    b16 = torch.randn(k, n, device=dev, dtype=torch.float16, generator=gen)
    a8 = torch.randint(-128, 128, (m, k), device=dev, dtype=torch.int8, generator=gen)
    # _int_mm wants the second operand column-major (cuBLASLt's INT8 "TN" layout)
    b8 = torch.randint(-128, 128, (n, k), device=dev, dtype=torch.int8, generator=gen).t()
    af = (a16 / 4).to(torch.float8_e4m3fn)
    bf = (b16 / 4).t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
    one = torch.ones((), device=dev, dtype=torch.float32)
    return {
        "fp16": lambda: torch.matmul(a16, b16),
        "int8": lambda: torch._int_mm(a8, b8),
        "fp8_e4m3": lambda: torch._scaled_mm(af, bf, scale_a=one, scale_b=one,
                                             out_dtype=torch.float16),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="JSON file to write (required but with --smoke)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--inner", type=int, default=10, help="GEMMs per timed repeat")
    _common.bench_args(p, "the two small shapes, 2 warm-up calls, 3 repeats of 2 GEMMs; "
                          "skipped without CUDA")
    args = p.parse_args(argv)
    shapes = SHAPES
    if args.smoke:
        shapes, args.warmup, args.repeats, args.inner = SHAPES[-2:], 2, 3, 2
    elif args.out is None:
        p.error("--out is required (the JSON file to write)")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        why = "torch is not installed" if torch is None else "no CUDA device"
        if args.smoke:
            return _common.skip(f"{why}: gemm_formats times GEMMs on a CUDA GPU")
        sys.stderr.write(f"gemm_formats: {why}; run it on a GPU machine\n")
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(0)
    doc = {"device": torch.cuda.get_device_name(0), "sm": props.major * 10 + props.minor,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "method": f"median of {args.repeats} repeats x {args.inner} GEMMs after "
                     f"{args.warmup} warm-up calls, CUDA events",
           "results": []}
    for m, k, n in shapes:
        flops = 2.0 * m * k * n
        row = {"m": m, "k": k, "n": n}
        for fmt, fn in _gemms(torch, m, k, n).items():
            try:
                ms = _time_ms(torch, fn, warmup=args.warmup, repeats=args.repeats,
                              inner=args.inner)
                row[fmt] = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
            except RuntimeError as exc:  # a format this GPU / torch cannot run
                row[fmt] = {"error": str(exc).splitlines()[0]}
        base = row["fp16"].get("ms")
        for fmt in ("int8", "fp8_e4m3"):
            if base and "ms" in row[fmt]:
                row[fmt]["vs_fp16"] = base / row[fmt]["ms"]
        doc["results"].append(row)
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)

    def best(fmt):
        xs = [r[fmt]["vs_fp16"] for r in doc["results"] if "vs_fp16" in r[fmt]]
        return f"{max(xs):.2f}" if xs else "na"

    print(f"{doc['device']}, torch {doc['torch']}, CUDA {doc['cuda']}")
    print(f"sm={doc['sm']} shapes={len(doc['results'])} int8_vs_fp16_max={best('int8')} "
          f"fp8_vs_fp16_max={best('fp8_e4m3')}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_benchmark("gemm_formats", main))
