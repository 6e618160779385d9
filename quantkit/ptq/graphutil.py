"""Initializer edits shared by the ptq techniques (copy-on-write for shared initializers)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from quantkit.graph.facts import attr, consumers, unique_name


class InitializerEditor:
    """Reads and rewrites float initializers of one model in place.

    ``replace(node, slot, array)`` gives ``node`` its own copy when the initializer is read
    by other nodes too (or twice), so an edit never leaks into an unrelated reader.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        graph = model.graph
        inputs = {i.name for i in graph.input}
        self.inits = {t.name: t for t in graph.initializer if t.name not in inputs}
        self.readers = consumers(graph)
        self.taken = ({t.name for t in graph.initializer}
                      | {o for n in graph.node for o in n.output}
                      | {i for n in graph.node for i in n.input} | inputs)
        self.node_names = {n.name for n in graph.node}

    def array(self, name: str) -> np.ndarray | None:
        t = self.inits.get(name)
        return numpy_helper.to_array(t) if t is not None else None

    def is_initializer(self, name: str) -> bool:
        return name in self.inits

    def replace(self, node: onnx.NodeProto, slot: int, value: np.ndarray) -> str:
        """Set ``node.input[slot]`` to ``value`` (same dtype); returns the initializer name."""
        name = node.input[slot]
        old = self.inits[name]
        arr = np.asarray(value, dtype=numpy_helper.to_array(old).dtype)
        shared = len(self.readers.get(name, ())) > 1 or list(node.input).count(name) > 1
        if shared:
            new = unique_name(f"{name}__{node.name or 'ptq'}", self.taken)
            self.taken.add(new)
            t = numpy_helper.from_array(arr, new)
            self.model.graph.initializer.append(t)
            self.inits[new] = self.model.graph.initializer[-1]  # append stored a copy
            node.input[slot] = new
            self.readers.setdefault(new, []).append(node)
            self.readers[name] = [r for r in self.readers[name] if r is not node]
            return new
        old.CopyFrom(numpy_helper.from_array(arr, name))
        return name

    def add(self, base: str, value: np.ndarray) -> str:
        """A new initializer named after ``base`` (unique)."""
        new = unique_name(base, self.taken)
        self.taken.add(new)
        t = numpy_helper.from_array(np.asarray(value), new)
        self.model.graph.initializer.append(t)
        self.inits[new] = self.model.graph.initializer[-1]  # append stored a copy
        return new

    def fresh_tensor(self, base: str) -> str:
        new = unique_name(base, self.taken)
        self.taken.add(new)
        return new

    def fresh_node(self, base: str) -> str:
        new = unique_name(base, self.node_names)
        self.node_names.add(new)
        return new


def weight_k_axis(node: onnx.NodeProto, w: np.ndarray) -> int | None:
    """The input-feature (K) axis of a constant 2-D MatMul / Gemm weight, else None."""
    if w is None or w.ndim != 2:
        return None
    if node.op_type == "MatMul":
        return 0
    if node.op_type == "Gemm" and int(attr(node, "transA", 0)) == 0:
        return 1 if int(attr(node, "transB", 0)) else 0
    return None


def reader_weights(ed: InitializerEditor, readers: list[onnx.NodeProto], channels: int
                   ) -> tuple[list[np.ndarray], list[int]] | str:
    """The constant weights of the MatMul / Gemm ``readers`` of one activation and their K
    axes, or why not (a K that is not the activation's ``channels``): the per-channel
    rewrites of an activation (SmoothQuant, shift) edit exactly these."""
    ws = [ed.array(r.input[1]) for r in readers]
    axes = [weight_k_axis(r, w) for r, w in zip(readers, ws)]
    if any(w.shape[ax] != channels for w, ax in zip(ws, axes)):
        return f"channel count {channels} does not match the weights' K"
    return ws, axes


def insert_nodes(model: onnx.ModelProto, placed: list[tuple[int, onnx.NodeProto]]) -> None:
    """Insert each ``(position, node)`` at its position in the graph's original order."""
    for pos, node in sorted(placed, key=lambda t: -t[0]):
        model.graph.node.insert(pos, node)


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m
