"""quantkit: calibrate, quantize and sign off INT8 / FP8 / mixed-precision ONNX models for
TensorRT.

The Python API (quantkit/api.py), beside ``python -m quantkit``:

    import quantkit
    record = quantkit.run(overrides=["experiment=bert_int8"])
    same = quantkit.load_record("experiments/bert_int8/<time>/record.json")  # a RunRecord

Importing this package is cheap: it never imports torch, transformers or tensorrt; the API's
modules load on first use.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

__all__ = ["__version__", "compose", "configure", "load_record", "run"]

_API = {"compose", "configure", "load_record"}


def __getattr__(name: str):
    """``quantkit.run`` (the package quantkit/run/, callable: quantkit/run/__init__.py) and the
    API functions of quantkit/api.py, imported on first access."""
    if name == "run":
        return importlib.import_module("quantkit.run")
    if name in _API:
        return getattr(importlib.import_module("quantkit.api"), name)
    raise AttributeError(f"module 'quantkit' has no attribute {name!r}")
