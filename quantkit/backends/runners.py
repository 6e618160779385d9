"""The one place that makes an ONNX Runtime runner: from a run's backend settings, or ONNX
Runtime CPU's defaults where no run is behind it (``backend=None``).

Calibration, the FP16 range check, evaluation, the backend check, the per-layer run, the
sensitivity search, the latency stage, the post-training passes and the model export's
embeddings all call :func:`ort_runner`, so the providers, provider options, disabled
optimizers and thread count a run declares apply everywhere (tests/test_architecture.py
checks that nothing else constructs an ``OrtRunner``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import onnx

from quantkit.backends.ort import OrtRunner

__all__ = ["ort_runner", "calibration_runner"]


def ort_runner(backend: Any, model: str | os.PathLike | onnx.ModelProto, *, name: str,
               extra_outputs: Sequence[str] = (), optimized_to: str | os.PathLike | None = None,
               disable_unsafe: bool = True, graph: Any = None,
               qdq_mode: str = "fused", memory_arena: bool = True,
               optimization_level: str = "all",
               disabled_optimizers: Sequence[str] | None = None) -> OrtRunner:
    """An :class:`OrtRunner` for ``model`` configured by ``backend`` (a BackendConfig; None:
    ONNX Runtime CPU defaults).

    ``extra_outputs``: intermediate tensors to return too. ``graph``: the ModelGraph of
    ``model`` when ``model`` is that graph's proto; the extra outputs are then typed from
    its one shape inference instead of a new one. ``disable_unsafe=False`` keeps every ORT
    optimizer (``backend.disabled_optimizers`` off). ``optimized_to``: write ORT's
    optimized graph there (kernel census). ``qdq_mode``: how Q/DQ runs (backends/ort.py:
    ``fused`` ORT's integer kernels, ``exact`` the Q/DQ semantics, ``integer``).
    ``memory_arena=False``: no ORT CPU memory arena (debug runs with many outputs).
    ``optimization_level``: ORT's graph optimization level (``basic`` for the post-training
    passes' FP32 captures); ``disabled_optimizers``: these instead of the backend's.
    """
    if graph is not None and extra_outputs and model is graph.model:
        model, extra_outputs = graph.with_outputs(extra_outputs), ()
    if backend is None:
        return OrtRunner(model, name=name, extra_outputs=extra_outputs,
                         disabled_optimizers=tuple(disabled_optimizers or ()),
                         graph_optimization_level=optimization_level,
                         save_optimized_to=optimized_to, qdq_mode=qdq_mode,
                         memory_arena=memory_arena)
    if disabled_optimizers is None:
        disabled_optimizers = backend.disabled_optimizers if disable_unsafe else ()
    return OrtRunner(model, name=name, providers=backend.providers,
                     provider_options=getattr(backend, "provider_options", None) or None,
                     disabled_optimizers=disabled_optimizers,
                     graph_optimization_level=optimization_level,
                     intra_op_threads=backend.intra_op_threads,
                     extra_outputs=extra_outputs, save_optimized_to=optimized_to,
                     qdq_mode=qdq_mode, memory_arena=memory_arena)


def calibration_runner(model: str | os.PathLike | onnx.ModelProto,
                       extra_outputs: Sequence[str]) -> OrtRunner:
    """ONNX Runtime CPU with its defaults, fetching ``extra_outputs``: the ``runner_factory``
    of :func:`quantkit.calibrate.collect.collect_stats` outside a run (tests, benchmarks)."""
    return ort_runner(None, model, name="calibrate", extra_outputs=extra_outputs)
