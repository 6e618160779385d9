"""quantkit: calibrate, quantize and sign off INT8 / FP8 / mixed-precision ONNX models for
TensorRT.

The Python API (quantkit/api.py), beside ``python -m quantkit``:

    import quantkit
    record = quantkit.run(overrides=["experiment=bert_int8"])
    record = quantkit.load_record("experiments/bert_int8/<time>/record.json")  # a RunRecord

Importing this package is cheap: it never imports torch, transformers or tensorrt; the API's
modules load on first use.

``quantkit.run`` is the package quantkit/run/ (the stages of one run) and, called, the API's
:func:`quantkit.api.run`: a module cannot be called, so this package's ``run`` attribute
hands out the run package with a callable class.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

__all__ = ["__version__", "compose", "configure", "load_record", "run"]

_API = ("compose", "configure", "load_record")


class _CallableRun(types.ModuleType):
    """The package quantkit.run, callable as :func:`quantkit.api.run`."""

    def __call__(self, overrides=(), *, run_dir=None):
        from quantkit.api import run  # the API loads every stage: only when called

        return run(overrides, run_dir=run_dir)


class _Quantkit(types.ModuleType):
    """This package: ``run`` is always the callable run package (the import system's own
    binding of the subpackage is absorbed by the setter)."""

    @property
    def run(self) -> _CallableRun:
        package = importlib.import_module("quantkit.run")
        package.__class__ = _CallableRun
        return package

    @run.setter
    def run(self, _package) -> None:
        pass


def __getattr__(name: str):
    """The API functions of quantkit/api.py, imported on first access."""
    if name in _API:
        return getattr(importlib.import_module("quantkit.api"), name)
    raise AttributeError(f"module 'quantkit' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Quantkit
