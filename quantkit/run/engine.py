"""A strongly typed TensorRT engine for one artifact (backend=trt): the EngineBuild value the
evaluation and latency stages read (never the record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quantkit.run.context import RunContext

__all__ = ["EngineBuild", "build_trt_engine"]


@dataclass(frozen=True)
class EngineBuild:
    """``engine_path`` and what the builder reported; ``int8_check`` when INT8 was planned."""

    engine_path: str
    meta: dict
    cache_hit: bool
    trtexec: Any
    layers_path: str
    int8_check: Any = None

    def to_record(self) -> dict:
        out = {"engine_path": self.engine_path, "meta": self.meta, "cache_hit": self.cache_hit,
               "trtexec": self.trtexec, "layers_path": self.layers_path}
        if self.int8_check is not None:
            out["int8_check"] = self.int8_check
        return out


def build_trt_engine(ctx: RunContext, onnx_path, planned_int8: list[str] | None) -> EngineBuild:
    """Engine for ``onnx_path`` (cached by ONNX, settings, TensorRT, GPU under cache_dir)."""
    from quantkit.backends.trt import EngineSettings, build_engine, check_int8_layers

    t = ctx.settings.backend.trt
    cache = ctx.cache_dir / "engines"
    es = EngineSettings(workspace_mb=t.workspace_mb, min_batch=t.min_batch, opt_batch=t.opt_batch,
                        max_batch=t.max_batch, min_sequence=t.min_sequence,
                        opt_sequence=t.opt_sequence, max_sequence=t.max_sequence,
                        timing_cache=t.timing_cache or str(cache / "timing.cache"),
                        builder_optimization_level=t.builder_optimization_level)
    art = build_engine(onnx_path, es, cache_dir=cache, rebuild=t.rebuild, device=t.device)
    check = (check_int8_layers(art.layers_path.read_text(), planned_int8) if planned_int8
             else None)
    return EngineBuild(engine_path=str(art.engine_path), meta=art.meta.to_dict(),
                       cache_hit=art.cache_hit, trtexec=art.trtexec,
                       layers_path=str(art.layers_path), int8_check=check)
