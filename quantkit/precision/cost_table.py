"""Per-architecture GEMM throughput of each format relative to FP16, with sources. Data only.

Published dense (no 2:4 sparsity) Tensor Core peaks, NVIDIA datasheets; ratio = format peak /
FP16 peak. INT8 and FP8 are 2x FP16 on every architecture that has them:

=========  ===  ===============================  =====================  ====  ====
arch       sm   GPU (FP16 dense TFLOP/s)          source                 INT8  FP8
=========  ===  ===============================  =====================  ====  ====
turing     75   T4 65; INT8 130 TOPS             T4 datasheet           2.0   --
ampere     80+  A100 312; INT8 624 TOPS          A100 datasheet         2.0   --
ada        89   L4 121; FP8 / INT8 242.5         L4 datasheet           2.0   2.0
hopper     90   H100 SXM 989.4; FP8 / INT8       H100 datasheet [1]     2.0   2.0
                1978.9
blackwell  100  B200 2250; FP8 / INT8 4500       HGX B200 datasheet     2.0   2.0
=========  ===  ===============================  =====================  ====  ====

[1] H100 SXM theoretical peaks (FP16 989.4, FP8 1978.9, INT8 1978.9 dense TFLOP/s), as
    tabulated at https://glennklockwood.com/garden/processors/h100 from NVIDIA's Hopper
    whitepaper; the other rows are NVIDIA's datasheet figures as quoted from the product
    pages (not re-checked by a search when this table was written).

Peaks overstate what a model's GEMMs get: measured on the lent H200 (``MEASURED_H200``,
``benchmarks/gemm_formats.py``, torch 2.11.0+cu130 / CUDA 13.0, cuBLASLt through torch, median
of 15 x 10 GEMMs after warm-up, CUDA events; raw JSON in
``benchmarks/results/gemm_formats_h200.json``), INT8 runs 0.77-1.33x and FP8 0.72-2.01x FP16:
small GEMMs are launch-bound and FP8 loses there. The cost model uses the measurement of the
nearest shape on Hopper and the published ratio elsewhere, and says which it used.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["PEAK_RATIO", "FP16_PEAK_TFLOPS", "MEASURED_H200", "ARCH_GPU", "GEMM_OPS"]

#: ops whose cost scales with the format's Tensor Core GEMM throughput
GEMM_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})

#: arch -> format -> dense peak throughput relative to FP16 (formats the arch lacks: absent)
PEAK_RATIO = MappingProxyType({
    "turing": MappingProxyType({"fp16": 1.0, "int8": 2.0}),
    "ampere": MappingProxyType({"fp16": 1.0, "int8": 2.0}),
    "ada": MappingProxyType({"fp16": 1.0, "int8": 2.0, "fp8": 2.0}),
    "hopper": MappingProxyType({"fp16": 1.0, "int8": 2.0, "fp8": 2.0}),
    "blackwell": MappingProxyType({"fp16": 1.0, "int8": 2.0, "fp8": 2.0}),
})

#: GPU name -> dense FP16 Tensor Core peak, TFLOP/s (datasheets, see the module docstring)
FP16_PEAK_TFLOPS = MappingProxyType({"T4": 65.0, "A100": 312.0, "A10": 125.0, "L4": 121.0,
                                     "L40S": 362.0, "H100": 989.4, "H200": 989.4,
                                     "B200": 2250.0})

#: arch -> the GPU whose FP16 peak stands for it when the target gives only a capability
ARCH_GPU = MappingProxyType({"turing": "T4", "ampere": "A100", "ada": "L4", "hopper": "H100",
                             "blackwell": "B200"})

#: measured on the lent H200: (M, K, N) -> format -> TFLOP/s (fp16, int8, fp8)
MEASURED_H200 = MappingProxyType({
    (4096, 768, 768): MappingProxyType({"fp16": 162.4, "int8": 199.5, "fp8": 131.7}),
    (4096, 768, 3072): MappingProxyType({"fp16": 532.8, "int8": 467.4, "fp8": 460.2}),
    (32768, 3072, 768): MappingProxyType({"fp16": 725.6, "int8": 555.9, "fp8": 1210.5}),
    (8192, 8192, 8192): MappingProxyType({"fp16": 672.0, "int8": 895.3, "fp8": 1352.3}),
    (512, 768, 768): MappingProxyType({"fp16": 20.3, "int8": 23.0, "fp8": 16.1}),
    (128, 768, 768): MappingProxyType({"fp16": 5.2, "int8": 6.1, "fp8": 3.8}),
})
