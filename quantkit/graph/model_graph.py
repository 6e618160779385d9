"""One FP32 graph's facts, computed once per run: named nodes, tensor types and shapes (from
ONE shape inference), constants, producers and consumers.

``ModelGraph.build(proto)`` names unnamed nodes of ``proto`` in place (the names every Plan
uses) and runs ONNX shape inference once; calibration, planning, Q/DQ insertion, the FP16
range check and the per-layer run read ``graph.infos`` instead of inferring again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import onnx

from quantkit.graph.facts import (FLOAT, TensorInfo, constant_tensors, consumers,
                                  ensure_node_names, producers, tensor_infos)

__all__ = ["ModelGraph"]


@dataclass(frozen=True)
class ModelGraph:
    """Read-only facts of ``model`` (an FP32 ONNX model whose nodes all have unique names).

    ``infos``: tensor -> TensorInfo (dtype, shape) for every tensor shape inference names and
    every constant; ``constants``: build-time constant tensors; ``producers``: tensor -> the
    node writing it; ``consumers``: tensor -> the nodes reading it; ``sha256``: digest of the
    deterministic serialization (after naming), for stage-cache keys.
    """

    model: onnx.ModelProto
    infos: Mapping[str, TensorInfo]
    constants: Mapping[str, onnx.TensorProto]
    producers: Mapping[str, onnx.NodeProto]
    consumers: Mapping[str, list[onnx.NodeProto]]
    node_names: tuple[str, ...]
    sha256: str

    @classmethod
    def build(cls, model: onnx.ModelProto) -> "ModelGraph":
        """Name ``model``'s nodes (in place) and compute every fact once."""
        ensure_node_names(model)
        g = model.graph
        return cls(model=model, infos=MappingProxyType(tensor_infos(model)),
                   constants=MappingProxyType(constant_tensors(g)),
                   producers=MappingProxyType(producers(g)),
                   consumers=MappingProxyType(dict(consumers(g))),
                   node_names=tuple(n.name for n in g.node),
                   sha256=hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest())

    def node(self, name: str) -> onnx.NodeProto:
        """The node called ``name`` (KeyError if the graph has none)."""
        for n in self.model.graph.node:
            if n.name == name:
                return n
        raise KeyError(name)

    def producer_name(self, tensor: str) -> str | None:
        """The name of the node writing ``tensor``, or None (graph input, constant)."""
        node = self.producers.get(tensor)
        return node.name if node is not None else None

    def node_outputs(self, names: Sequence[str]) -> list[str]:
        """Outputs of the nodes ``names``, in graph order."""
        wanted = set(names)
        return [o for n in self.model.graph.node if n.name in wanted for o in n.output if o]

    def float32_outputs(self) -> list[str]:
        """Every node output that is float32 (or of unknown type), in graph order."""
        return [o for n in self.model.graph.node for o in n.output
                if o and (self.infos[o].elem_type if o in self.infos else FLOAT) == FLOAT]

    def with_outputs(self, names: Sequence[str]) -> onnx.ModelProto:
        """A copy of the model that also outputs the tensors ``names`` (typed from ``infos``).

        Runners take this instead of running shape inference again on the FP32 graph."""
        out = onnx.ModelProto()
        out.CopyFrom(self.model)
        existing = {o.name for o in out.graph.output}
        for n in dict.fromkeys(names):
            if n in existing:
                continue
            info = self.infos.get(n)
            out.graph.output.append(
                onnx.helper.make_tensor_value_info(n, info.elem_type, None)
                if info is not None and info.elem_type else
                onnx.helper.make_empty_tensor_value_info(n))
        return out
