"""The MatMul / Gemm inputs a pre-calibration rewrite may change, and one pass over them.

SmoothQuant (quantkit/ptq/smoothquant.py) and the channel shift (quantkit/ptq/shift.py)
both rewrite an activation that constant-weight MatMul / Gemm nodes read as their data
input, per tensor, on a copy of the graph: :func:`smoothable_inputs` finds those tensors,
:class:`InputRewrite` holds the copy and what one pass changed, skipped and inserted, and
:meth:`InputRewrite.finish` inserts the new nodes and returns the step's record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx

from quantkit.graph.facts import ensure_node_names
from quantkit.ptq.graphutil import InitializerEditor, copy_model, insert_nodes, weight_k_axis
from quantkit.ptq.step_record import StepRecord

__all__ = ["InputRewrite", "smoothable_inputs"]


def smoothable_inputs(model: onnx.ModelProto, *, nodes: Iterable[str] | None = None
                      ) -> dict[str, list[str]]:
    """activation tensor -> names of the MatMul / Gemm nodes with a constant 2-D weight that
    read it as their data input (restricted to ``nodes`` when given), in graph order."""
    ensure_node_names(model)
    ed = InitializerEditor(model)
    only = set(nodes) if nodes is not None else None
    out: dict[str, list[str]] = {}
    for n in model.graph.node:
        if n.op_type not in ("MatMul", "Gemm") or len(n.input) < 2:
            continue
        if only is not None and n.name not in only:
            continue
        x, w_name = n.input[0], n.input[1]
        if ed.is_initializer(x) or not ed.is_initializer(w_name) or x == w_name:
            continue
        if weight_k_axis(n, ed.array(w_name)) is None:
            continue
        out.setdefault(x, []).append(n.name)
    return out


class InputRewrite:
    """One rewrite pass over a copy of ``model``: ``groups`` (:func:`smoothable_inputs` of
    the copy), its ``editor``, nodes ``by_name``, graph ``outputs``, and what the pass
    records as it goes (``changes`` / ``skipped`` per tensor, the node ``rewrites``, the
    ``new_nodes`` with the position they go before). A local builder: made, filled and
    finished inside one pass."""

    def __init__(self, model: onnx.ModelProto, *, nodes: Iterable[str] | None = None) -> None:
        self.model = copy_model(model)
        ensure_node_names(self.model)
        self.groups = smoothable_inputs(self.model, nodes=nodes)
        self.editor = InitializerEditor(self.model)
        self.by_name = {n.name: n for n in self.model.graph.node}
        self.outputs = {o.name for o in self.model.graph.output}
        self.changes: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.rewrites: list[tuple[str, ...]] = []
        self.new_nodes: list[tuple[int, onnx.NodeProto]] = []

    def insert_before(self, node: onnx.NodeProto, readers: Iterable[str]) -> None:
        """Queue ``node`` to go before the first of ``readers`` in graph order."""
        names = set(readers)
        first = min(i for i, n in enumerate(self.model.graph.node) if n.name in names)
        self.new_nodes.append((first, node))

    def finish(self, step: str, params: Mapping[str, object]
               ) -> tuple[onnx.ModelProto, StepRecord]:
        """The rewritten copy (queued nodes inserted) and the step's record."""
        insert_nodes(self.model, self.new_nodes)
        return self.model, StepRecord(step, dict(params), self.changes, self.skipped,
                                      tuple(self.rewrites))
