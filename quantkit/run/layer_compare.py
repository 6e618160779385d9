"""Per-tensor statistics of one candidate against an open FP32 reference runner (the
layerwise stage's debug run, the search's proxy on a ptq-rewritten graph)."""

from __future__ import annotations

from quantkit.compare.layer_diff import diff_layers
from quantkit.run.context import RunContext

__all__ = ["compare_candidate"]


def compare_candidate(ctx: RunContext, ref, candidate, tensors, data, amax, *, name: str,
                      parts=None) -> dict[str, dict]:
    """Per-tensor stats of ``candidate`` (an ONNX proto) against the open reference runner
    ``ref`` on ``data``, in ``compare.batch_size`` batches, at most
    ``compare.max_outputs_per_run`` tensors fetched per inference. The candidate runner
    has no ORT memory arena (``ref`` should not either: ``memory_arena=False``); numbers
    are the same with or without one. ``parts``: channel ranges also compared on their own
    (:func:`~quantkit.compare.layer_diff.diff_layers`)."""
    s = ctx.settings.compare
    with ctx.runner(candidate, name=name, extra_outputs=tensors, memory_arena=False) as run:
        return diff_layers(ref, {name: run}, ctx.batches(data, s.batch_size), {name: tensors},
                        amax={name: amax}, max_outputs=s.max_outputs_per_run,
                        parts=parts)[name]
