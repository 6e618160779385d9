"""quantkit: calibrate, quantize and sign off INT8 / mixed-precision ONNX models for TensorRT.

Importing this package is cheap: it never imports torch, transformers or tensorrt.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
