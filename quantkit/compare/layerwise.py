"""Per-layer comparison of FP32 against a candidate, streamed over eval batches.

A separate debug run (DESIGN.md): both models run with the compared tensors marked as extra
outputs, so fusions that hide them in the signed artifact do not matter here. Tensors are
matched by their original names (Q/DQ insertion keeps node outputs' names and records every
inserted tensor in a QdqMap), never by parsing names. Memory: one LayerStats per tensor.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx

from quantkit.compare.metrics import LayerStats, json_safe_stats

log = logging.getLogger(__name__)


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


def compare_layers(reference_runner, candidate_runner, batches: Iterable[Mapping[str, np.ndarray]],
                   tensors: Sequence[str], *, amax: Mapping[str, float] | None = None
                   ) -> dict[str, dict]:
    """LayerStats per tensor over all ``batches``. Runners must output ``tensors``."""
    amax = amax or {}
    stats = {t: LayerStats() for t in tensors}
    for feed in batches:
        ref = reference_runner.infer(feed, list(tensors))
        cand = candidate_runner.infer(feed, list(tensors))
        for t in tensors:
            stats[t].update(ref[t], cand[t], amax=amax.get(t))
    return {t: json_safe_stats(s.result()) for t, s in stats.items()}
