"""Stage "layerwise": per-layer statistics of every artifact vs FP32 on an eval subset (a
separate debug run with the compared tensors marked as outputs), the FP16 floor, flagged
layers and the first diverging node of each INT8 candidate."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import onnx

from quantkit.backends.trt.infer import build_for_run, runner_for
from quantkit.compare.layer_diff import diff_layers, shared_tensors
from quantkit.compare.metrics import first_diverging, flag_layers
from quantkit.run.artifact import Artifact
from quantkit.run.context import RunContext
from quantkit.run.detection import is_detection
from quantkit.run.layer_compare import compare_candidate
from quantkit.run.scope import QuantScope

__all__ = ["LayerReport", "layerwise"]


@dataclass(frozen=True)
class LayerReport:
    """``layers``: candidate -> tensor -> stats (``fp16`` is the floor);
    ``flagged`` / ``first_diverging`` / ``first_diverging_node``: per INT8 candidate."""

    layers: dict[str, dict[str, dict]]
    flagged: dict[str, list]
    first_diverging: dict[str, str | None]
    first_diverging_node: dict[str, str | None]
    examples: int
    engine_layers: dict | None = None  # backend=trt: flagged tensors re-measured on the engine

    def to_record(self, name: str) -> dict:
        """The per-layer fields of candidate ``name``'s record entry."""
        if name not in self.layers:
            return {}
        out = {"layers": self.layers[name]}
        if name in self.flagged:
            out.update({"flagged_layers": self.flagged[name],
                        "first_diverging": self.first_diverging[name],
                        "first_diverging_node": self.first_diverging_node[name]})
        if self.engine_layers and name in self.engine_layers:
            out["engine_layers"] = self.engine_layers[name]
        return out


def layerwise(ctx: RunContext, scope: QuantScope, artifacts: dict[str, Artifact]
              ) -> LayerReport:
    """Cached per-layer comparison of ``artifacts`` (``fp16`` first: the floor)."""
    s = ctx.settings
    tensors = list(scope.compare_tensors)
    parts = {}
    if is_detection(ctx):  # the outputs the decoder reads, each range of meaning on its own
        det = ctx.prepared_feeds().detector
        tensors += [o.name for o in det.outputs if o.name not in set(tensors)]
        parts = det.output_parts()
    subset = list(range(min(s.compare.subset, len(ctx.splits.dev))))
    inputs = {"model": ctx.model.sha256, "artifacts": {n: a.sha256 for n, a in artifacts.items()},
              "emulated": {n: a.emulated is not None for n, a in artifacts.items()},
              "tensors": tensors, "parts": parts, "dev": ctx.splits.dev.sha256, "subset": subset,
              "batch": s.compare.batch_size, "qdq_mode": ctx.qdq_mode(),
              "amax": {n: a.activation_amax for n, a in artifacts.items()}, **ctx.feeds_key(),
              **ctx.measured_key()}
    layers, _, _ = ctx.cached("layerwise", inputs, lambda: (
        _run(ctx, artifacts, tensors, subset, parts), None))
    floor = layers["fp16"]
    flagged, first, first_node = {}, {}, {}
    for name, per in layers.items():
        if name == "fp16":
            continue
        kw = dict(order=[t for t in tensors if t in per], floor_multiple=s.compare.floor_multiple)
        flagged[name] = [f for f in flag_layers(per, floor, **kw) if f.get("flagged")]
        tensor = first_diverging(per, floor, **kw)
        first[name] = tensor
        first_node[name] = ctx.graph.producer_name(tensor) if tensor else None
    engine = _on_engine(ctx, artifacts, flagged, subset) if s.backend.name == "trt" else None
    return LayerReport(layers=layers, flagged=flagged, first_diverging=first,
                       first_diverging_node=first_node, examples=len(subset),
                       engine_layers=engine)


def _on_engine(ctx: RunContext, artifacts: dict[str, Artifact], flagged: dict[str, list],
               subset) -> dict[str, dict[str, dict]]:
    """backend=trt: the tensors the ONNX Runtime comparison flagged, re-measured on a debug
    engine of each artifact (TensorRT debug tensors, ``--markDebug`` style: a separate
    engine, so the signed-off engine is never perturbed)."""
    out = {}
    data = ctx.splits.dev.subset(subset)
    for name, rows in flagged.items():
        names = [f["name"] for f in rows if f["name"] in set(ctx.graph.infos)]
        if not names:
            continue
        dbg = build_for_run(ctx.settings, artifacts[name].path, None,
                            cache_dir=ctx.cache_dir / "engines", debug_tensors=names)
        with contextlib.ExitStack() as stack:
            ref = stack.enter_context(ctx.runner(ctx.graph.model, name="debug-fp32",
                                                 extra_outputs=names))
            run = stack.enter_context(runner_for(ctx.settings, dbg, name=f"engine-{name}",
                                                 debug=True))
            out[name] = diff_layers(ref, {name: run}, ctx.batches(data, ctx.settings.compare.batch_size),
                                 {name: names},
                                 amax={name: artifacts[name].activation_amax})[name]
    return out


def _run(ctx: RunContext, artifacts: dict[str, Artifact], tensors, subset, parts=None
         ) -> dict[str, dict[str, dict]]:
    ref_proto = ctx.graph.model
    data = ctx.splits.dev.subset(subset)

    def candidate(art):
        return (art.emulated() if art.emulated is not None
                else ref_proto if art.is_fp32_graph else onnx.load(art.path))

    names = {name: shared_tensors(ref_proto, candidate(art), tensors)
             for name, art in artifacts.items()}
    union = list(dict.fromkeys(t for ts in names.values() for t in ts))
    out = {}
    # one candidate session at a time beside the reference (the reference reruns per
    # candidate): with every compared tensor an output, a session per candidate held at
    # once was the run's memory peak (4.5 GB for MiniLM's five candidates). Debug runners
    # have no ORT memory arena: an arena keeps the largest fetch's buffers pooled in both
    # sessions beside the numpy copies of the outputs (measured: see compare_candidate)
    seen: dict[tuple, str] = {}  # identical artifacts (calibrators whose searched ranges
    # converged: byte-identical files) are compared once
    with ctx.runner(ref_proto, name="debug-fp32", extra_outputs=union,
                    memory_arena=False) as ref:
        for name, art in artifacts.items():
            same = (art.sha256, art.emulated is not None, tuple(sorted(art.activation_amax.items())))
            if same in seen:
                out[name] = out[seen[same]]
                continue
            seen[same] = name
            out[name] = compare_candidate(ctx, ref, candidate(art), names[name], data,
                                          art.activation_amax, name=f"debug-{name}",
                                          parts=parts)
    return out


