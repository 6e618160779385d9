"""The run context every stage takes explicitly: settings, directories, the stage cache, and
(after the model stage, :func:`quantkit.run.stages.model.model`) the model, splits, feeds and ModelGraph.

Nothing here is module-level state: two runs in one process (a test, a reused joblib
worker) each build their own RunContext and share nothing by accident.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from quantkit.backends.ort import evaluation_qdq_mode
from quantkit.backends.runners import ort_runner
from quantkit.cache import ARRAYS_NAME, JSON_NAME, StageCache, save_arrays, stage_key
from quantkit.data.feeds import ImageFeeds, TextFeeds
from quantkit.data.splits import Splits
from quantkit.environment import execution_environment
from quantkit.fsutil import atomic_write_json
from quantkit.graph.model_graph import ModelGraph
from quantkit.models.model import Model
from quantkit.run.model_identity import ModelIdentity
from quantkit.settings import Settings
from quantkit.tasks.detection.feeds import DetectionFeeds
from quantkit.verdict.policy import TestPolicy

__all__ = ["RunContext", "make_context"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """What every stage of one run reads; made once by :func:`make_context`.

    ``cache``: the run's StageCache, or None (compute everything, keep nothing).
    ``model`` (quantkit.models.Model), ``splits`` (quantkit.data.Splits), ``feeds``
    (TextFeeds | ImageFeeds | DetectionFeeds), ``lengths`` (split name -> token counts, or None for images) and ``graph``
    (ModelGraph of the FP32 model) are set by :meth:`with_inputs` after the prepare stage,
    with ``identity``, the model's identity for the test ledger.
    ``policy``: the verdict's :class:`TestPolicy`, built once from the settings here and
    taken by every test of the run.
    """

    settings: Settings
    run_dir: Path
    cache_dir: Path
    cache: StageCache | None = None
    model: Model | None = None
    splits: Splits | None = None
    feeds: TextFeeds | ImageFeeds | DetectionFeeds | None = None
    lengths: dict[str, np.ndarray | None] | None = None  # token counts (text) or None
    graph: ModelGraph | None = None
    policy: TestPolicy = None  # type: ignore[assignment]  # built in __post_init__
    identity: ModelIdentity | None = None  # the model for the test ledger (model stage)

    def __post_init__(self) -> None:
        if self.policy is None:
            object.__setattr__(self, "policy", TestPolicy.from_settings(self.settings))

    def with_inputs(self, *, model, splits, feeds, lengths, graph,
                    identity: ModelIdentity | None = None) -> "RunContext":
        return dataclasses.replace(self, model=model, splits=splits, feeds=feeds,
                                   lengths=lengths, graph=graph, identity=identity)

    # -- splits ---------------------------------------------------------------------------
    def split(self, name: str):
        """The ``dev`` split (everything that chooses) or the ``test`` split (sign-off only)."""
        if name not in ("dev", "test"):
            raise ValueError(f"split must be 'dev' or 'test', not {name!r}")
        return getattr(self.splits, name)

    def split_lengths(self, name: str, n: int | None = None):
        """Token counts of the first ``n`` examples of split ``name`` (None for images)."""
        lengths = (self.lengths or {}).get(name)
        if lengths is None:
            return None
        return lengths if n is None else lengths[:n]

    def qdq_mode(self) -> str:
        """How evaluation runs Q/DQ: ``backend.qdq_mode``, or (auto) exact for
        target=tensorrt and ORT's fused kernels for target=ort_cpu (backends/ort.py)."""
        mode = self.settings.backend.qdq_mode
        return evaluation_qdq_mode(self.settings.target) if mode == "auto" else mode

    # -- the stage cache ------------------------------------------------------------------
    def cached(self, stage: str, inputs: dict, compute: Callable[[], tuple[Any, dict | None]]
               ) -> tuple[Any, dict[str, np.ndarray], bool]:
        """``compute() -> (json_obj, arrays)`` once per content key; later runs load it.

        Returns ``(json_obj, arrays, hit)``. The key hashes ``inputs`` (upstream hashes and
        the settings that matter); a corrupted entry is detected by the cache's per-file
        sha256 and recomputed.
        """
        if self.cache is None:
            obj, arrays = compute()
            return obj, arrays or {}, False

        def _compute(tmp: Path) -> None:
            obj, arrays = compute()
            atomic_write_json(tmp / JSON_NAME, obj, durable=False)
            if arrays:
                save_arrays(tmp / ARRAYS_NAME, arrays)

        entry, hit = self.cache.get_or_compute(stage, stage_key(stage, **inputs), _compute,
                                               inputs=inputs)
        obj = self.cache.load_json(entry)
        arrays = self.cache.load_arrays(entry) if (entry / ARRAYS_NAME).exists() else {}
        return obj, arrays, hit

    def invalidate(self, stage: str, inputs: dict) -> None:
        """Drop the cache entry of ``inputs`` (``bench.remeasure``)."""
        if self.cache is not None:
            self.cache.invalidate(stage, stage_key(stage, **inputs))

    def measured_key(self) -> dict[str, Any]:
        """What every cached measured or float-computed value depends on beyond its inputs:
        CPU, ISA, numpy's BLAS kernel, ORT version (and GPU / TensorRT facts on backend=trt)."""
        return {"environment": execution_environment(self.settings.backend)}

    # -- feeds ----------------------------------------------------------------------------
    def prepared_feeds(self) -> "TextFeeds | ImageFeeds | DetectionFeeds":
        """The run's feeds; an error if the model stage has not made them yet."""
        if self.feeds is None:
            raise RuntimeError("RunContext.feeds is set by prepare_model (with_inputs); "
                               "a stage ran before it")
        return self.feeds

    def batches(self, data, batch_size: int, lengths=None):
        """Feed dicts of ``data`` (a split) from the run's feeds."""
        return self.prepared_feeds().feeds(data, batch_size, lengths=lengths)

    def feeds_key(self) -> dict:
        """What a stage-cache key needs about the feeds beyond the data hash (text: nothing)."""
        key = self.prepared_feeds().cache_key()
        m = self.model
        if m is not None and (getattr(m, "pooling", "none") != "none"
                              or self.settings.model.output.name is not None):
            key["output"] = {"name": m.output_name, "pooling": m.pooling}  # model.output.*
        return key

    @staticmethod
    def head(split, n: int):
        """The first ``n`` examples of a split (the whole split when it is shorter)."""
        return split.subset(range(min(n, len(split))))

    # -- runners --------------------------------------------------------------------------
    def runner(self, model, *, name: str, extra_outputs=(), optimized_to=None,
               disable_unsafe: bool = True, qdq_mode: str | None = None,
               memory_arena: bool = True, graph=None):
        """An ONNX Runtime runner with the run's backend settings (backends/runners.py);
        extra outputs of the FP32 graph are typed from the run's one shape inference.
        ``qdq_mode``: default :meth:`qdq_mode` (evaluation numerics); ``"fused"`` runs the
        artifact as the backend deploys it (backend check, kernel census);
        ``memory_arena=False``: no ORT CPU memory arena (per-layer debug runs); ``graph``:
        the ModelGraph ``model`` belongs to when it is not the run's (the ptq graph)."""
        return ort_runner(self.settings.backend, model, name=name, extra_outputs=extra_outputs,
                          optimized_to=optimized_to, disable_unsafe=disable_unsafe,
                          graph=graph or self.graph, qdq_mode=qdq_mode or self.qdq_mode(),
                          memory_arena=memory_arena)


def is_sweep_job() -> bool:
    """True inside a Hydra multirun job (``python -m quantkit -m ...``)."""
    try:
        return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:  # pragma: no cover - Hydra internals; a plain run is not a sweep job
        return False


def make_context(settings: Settings, run_dir: Path, cache_dir: Path) -> RunContext:
    """The run's context with its StageCache (``stage_cache=false``: a disabled cache)."""
    root = (Path(settings.stage_cache_dir).expanduser() if settings.stage_cache_dir
            else cache_dir / "stages")
    return RunContext(settings=settings, run_dir=Path(run_dir), cache_dir=Path(cache_dir),
                      cache=StageCache(root, enabled=settings.stage_cache))
