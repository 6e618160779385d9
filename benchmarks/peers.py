"""The peers quantkit is measured against, driven through their own public APIs.

ONNX Runtime's ``quantize_static`` in TensorRT style: QDQ format, signed symmetric INT8
activations and weights, per-channel weights, a weighted-op scope. NVIDIA ModelOpt runs in
its own virtual environment (it pulls onnxruntime-gpu and pins onnx): see
``accuracy_vs_peers.py``.
"""

from __future__ import annotations

import time
from pathlib import Path


def feed_reader(feeds):
    """An ONNX Runtime CalibrationDataReader over a list of feed dicts (read once)."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    return Reader()


def ort_quantize(model_path: str | Path, out_path: str | Path, feeds: list[dict], *,
                 method: str = "percentile", percentile: float = 99.99,
                 op_types=("MatMul", "Gemm"), nodes_to_quantize=None) -> float:
    """Quantize with onnxruntime.quantization.quantize_static; returns seconds.

    ``nodes_to_quantize``: restrict quantization to these node names (None: every node of
    ``op_types``), e.g. the INT8 nodes of a quantkit plan, so both tools have the same scope.
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    methods = {"minmax": CalibrationMethod.MinMax, "percentile": CalibrationMethod.Percentile,
               "entropy": CalibrationMethod.Entropy}
    extra = {"ActivationSymmetric": True, "WeightSymmetric": True}
    if method == "percentile":  # 2048 bins (ORT's default for percentile)
        extra["CalibPercentile"] = percentile
    # entropy: quantize_static passes no bin count to its calibrator, so ORT's Entropy always
    # uses 128 bins / 128 quantized bins (onnxruntime.quantization.calibrate.create_calibrator)
    t0 = time.perf_counter()
    quantize_static(str(model_path), str(out_path), feed_reader(feeds), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=list(op_types), per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=methods[method], extra_options=extra,
                    nodes_to_quantize=list(nodes_to_quantize) if nodes_to_quantize else None)
    return time.perf_counter() - t0
