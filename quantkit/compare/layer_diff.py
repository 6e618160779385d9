"""Per-layer comparison of FP32 against a candidate, streamed over eval batches.

A separate debug run (DESIGN.md): both models run with the compared tensors marked as extra
outputs, so fusions that hide them in the signed artifact do not matter here. Tensors are
matched by their original names (Q/DQ insertion keeps node outputs' names and records every
inserted tensor in a QdqMap), never by parsing names. Memory: one LayerStats per tensor.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx

from quantkit.compare.metrics import LayerStats, json_safe_stats

log = logging.getLogger(__name__)

#: :func:`part_key`'s form (part names are the decoders': boxes, scores, objectness)
_PART_KEY = re.compile(r"^(?P<tensor>.+)\[(?P<part>[a-z_]+)\]$")


def float_outputs(model: onnx.ModelProto, nodes: Iterable[str]) -> list[str]:
    """Outputs of ``nodes`` (by name) in graph order."""
    wanted = set(nodes)
    return [o for n in model.graph.node if n.name in wanted for o in n.output if o]


def shared_tensors(reference: onnx.ModelProto, candidate: onnx.ModelProto,
                   tensors: Sequence[str]) -> list[str]:
    """The tensors of ``tensors`` that both graphs produce (or take as input)."""
    def names(m: onnx.ModelProto) -> set[str]:
        return {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}

    both = names(reference) & names(candidate)
    return [t for t in tensors if t in both]


def part_key(tensor: str, part: str) -> str:
    """The stats key of channel range ``part`` of ``tensor``: ``<tensor>[<part>]``."""
    return f"{tensor}[{part}]"


def split_part_key(key: str) -> tuple[str, str] | None:
    """``(tensor, part)`` of a :func:`part_key`, None for a whole tensor's key."""
    m = _PART_KEY.match(key)
    return (m["tensor"], m["part"]) if m else None


def output_chunks(names: Sequence[str], max_outputs: int | None) -> list[list[str]]:
    """``names`` in order, cut into the fewest chunks of at most ``max_outputs`` names, all
    of (nearly) equal size: 98 tensors at 64 per run are two runs of 49, not 64 + 34, so
    the largest fetch (the debug run's memory peak) is as small as that many runs allow."""
    names = list(names)
    if not names:
        return [[]]
    runs = -(-len(names) // (max_outputs or len(names)))
    size, extra = divmod(len(names), runs)  # the first ``extra`` chunks get one more
    out, start = [], 0
    for i in range(runs):
        end = start + size + (i < extra)
        out.append(names[start:end])
        start = end
    return out


def diff_layers(reference_runner, candidate_runners: Mapping[str, object],
                   batches: Iterable[Mapping[str, np.ndarray]],
                   tensors: Mapping[str, Sequence[str]], *,
                   amax: Mapping[str, Mapping[str, float]] | None = None,
                   max_outputs: int | None = None,
                   parts: Mapping[str, Mapping[str, tuple[int, int, int | None]]] | None = None
                   ) -> dict[str, dict[str, dict]]:
    """LayerStats per candidate and tensor, all candidates in lockstep with ONE reference run.

    ``tensors[name]`` lists the tensors compared for candidate ``name`` (the reference runner
    must output their union); ``amax[name]`` gives calibrated ranges for clipping rates.
    ``max_outputs``: fetch at most this many tensors per inference; more are fetched in
    several passes over the same batch (identical statistics, each tensor's batches still
    accumulate in order; memory bounded by the chunk instead of every tensor at once), in
    chunks of equal size (:func:`output_chunks`). ``parts``: tensor -> part name -> (axis,
    start, stop), channel ranges of one tensor also compared on their own, as
    ``<tensor>[<part>]`` (a detector's boxes and scores packed in one output).
    """
    amax = amax or {}
    parts = parts or {}
    union = list(dict.fromkeys(t for ts in tensors.values() for t in ts))
    chunks = output_chunks(union, max_outputs)
    stats = {name: {k: LayerStats() for t in tensors[name]
                    for k in (t, *(part_key(t, p) for p in parts.get(t, {})))}
             for name in candidate_runners}
    for feed in batches:
        for chunk in chunks:
            ref = reference_runner.infer(feed, chunk)
            for name, runner in candidate_runners.items():
                names = [t for t in chunk if t in stats[name]]
                if not names:
                    continue
                cand = runner.infer(feed, names)
                ranges = amax.get(name, {})
                for t in names:
                    stats[name][t].update(ref[t], cand[t], amax=ranges.get(t))
                    for p, (axis, start, stop) in parts.get(t, {}).items():
                        cut = (slice(None),) * axis + (slice(start, stop),)
                        stats[name][part_key(t, p)].update(ref[t][cut], cand[t][cut])
            del ref
    return {name: {t: json_safe_stats(s.result()) for t, s in per.items()}
            for name, per in stats.items()}
