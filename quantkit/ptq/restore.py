"""Put the original FP32 function back on every node a plan does not quantize.

A post-training step rewrites groups of nodes together: SmoothQuant scales a LayerNorm (or
inserts a ``Mul``) and the MatMuls reading it; equalization scales a Conv pair (and may
replace the ReLU6 between by ``Relu`` + ``Min``); weight rounding and bias correction edit
one INT8 node's weight and bias (adding a bias input to a bias-less Conv). Each step records
those groups (:attr:`quantkit.ptq.step_record.StepRecord.groups`: the names of the nodes it
changed, removed or inserted). A group is needed only by the INT8 nodes in it: a plan that
keeps every node of a group in FP16 / FP32 must run the group as the original graph does,
constants the step added included.

    model, restored = revert_groups(rewritten, original, groups, keep=plan.int8_nodes())

Every group without a node of ``keep`` is replaced by the original's nodes of the same names
(op type, inputs, attributes: exactly the original nodes), the nodes the step inserted are
removed, and the initializers the restored nodes read come from the original. The result
computes the original function on every restored node, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from quantkit.graph.facts import producers, unique_name

__all__ = ["merge_groups", "revert_groups", "toposort_nodes"]


def merge_groups(groups: Iterable[Iterable[str]]) -> list[frozenset[str]]:
    """Overlapping groups merged (a node in two groups ties them: equalization chains)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g in groups:
        members = [m for m in g if m]
        for m in members:
            parent.setdefault(m, m)
        for m in members[1:]:
            parent[find(m)] = find(members[0])
    out: dict[str, set[str]] = {}
    for m in parent:
        out.setdefault(find(m), set()).add(m)
    return [frozenset(s) for s in out.values()]


def toposort_nodes(nodes: list[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` in an order where every input is produced before it is read (Kahn's
    algorithm, earliest given position first: the given order wherever it is already valid).
    ``available``: graph inputs and initializers. Nodes left in a cycle (or reading a tensor
    nobody makes) keep their given order at the end."""
    import heapq

    made = set(available) | {""}
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    missing = [0] * len(nodes)
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        for t in dict.fromkeys(n.input):
            if t in made or t not in producer:
                continue
            missing[i] += 1
            readers.setdefault(producer[t], []).append(i)
    ready = [i for i, k in enumerate(missing) if k == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in readers.get(i, ()):
            missing[j] -= 1
            if missing[j] == 0:
                heapq.heappush(ready, j)
    placed = set(order)
    return [nodes[i] for i in order] + [n for i, n in enumerate(nodes) if i not in placed]


def revert_groups(model: onnx.ModelProto, base: onnx.ModelProto,
                  groups: Iterable[Iterable[str]], keep: Iterable[str]
                  ) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every group (merged, :func:`merge_groups`) that holds no node of
    ``keep`` put back exactly as in ``base`` (module doc). Returns the model (``model``
    itself when nothing is reverted) and the names of the restored ``base`` nodes."""
    keep = set(keep)
    base_by_name = {n.name: n for n in base.graph.node}
    in_model = {n.name for n in model.graph.node}
    merged = [frozenset(n for n in grp if n in in_model or n in base_by_name)
              for grp in merge_groups(groups) if not grp & keep]
    merged = [grp for grp in merged if grp]
    revert = set().union(*merged) if merged else set()
    if not revert:
        return model, []
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    kept = [n for n in g.node if n.name not in revert]
    restored = [n for n in base.graph.node if n.name in revert]
    inits = {t.name: t for t in g.initializer}
    base_inits = {t.name: t for t in base.graph.initializer}
    taken = set(inits) | {o for n in g.node for o in n.output} | {i.name for i in g.input}
    read_by_kept = {i for n in kept for i in n.input}
    made = {o for n in kept for o in n.output}
    new_nodes: list[onnx.NodeProto] = []
    todo = list(restored)
    brought = {n.name for n in restored}
    base_producer = producers(base.graph)
    graph_inputs = {i.name for i in g.input}
    while todo:  # the restored nodes, and base producers of what they read that model lacks
        node = onnx.NodeProto()
        node.CopyFrom(todo.pop(0))
        for slot, t in enumerate(node.input):
            if not t or t in made:
                continue
            if t in base_inits:
                orig = base_inits[t]
                have = inits.get(t)
                if have is None:
                    g.initializer.append(orig)
                    inits[t] = g.initializer[-1]
                elif have.SerializeToString() != orig.SerializeToString():
                    if t in read_by_kept:  # another node still reads the edited value
                        new = unique_name(f"{t}__orig", taken)
                        taken.add(new)
                        copy = onnx.TensorProto()
                        copy.CopyFrom(orig)
                        copy.name = new
                        g.initializer.append(copy)
                        inits[new] = g.initializer[-1]
                        node.input[slot] = new
                    else:
                        have.CopyFrom(orig)
                continue
            producer = base_producer.get(t)
            if producer is not None and producer.name not in brought and t not in graph_inputs:
                brought.add(producer.name)
                todo.append(producer)
        new_nodes.append(node)
        made.update(node.output)
    # the restored group takes the place of its first node in ``model``: the original order
    # wherever the original had it
    group_of = {name: i for i, grp in enumerate(merged) for name in grp}
    restored_names = {n.name for n in restored}
    by_name = {n.name: n for n in new_nodes}
    placed: set[str] = set()
    emitted_groups: set[int] = set()
    order_hint = [n for n in new_nodes if n.name not in restored_names]  # brought producers
    placed.update(n.name for n in order_hint)
    for n in g.node:
        if n.name not in revert:
            order_hint.append(n)
            continue
        gi = group_of[n.name]
        if gi in emitted_groups:
            continue
        emitted_groups.add(gi)
        for b in restored:
            if group_of.get(b.name) == gi and b.name not in placed:
                order_hint.append(by_name[b.name])
                placed.add(b.name)
    order_hint += [by_name[b.name] for b in restored if b.name not in placed]
    available = {i.name for i in g.input} | set(inits)
    order = toposort_nodes(order_hint, available)
    del g.node[:]
    g.node.extend(order)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    _drop_unused_initializers(g, used)
    return m, [n.name for n in restored]


def _drop_unused_initializers(g: onnx.GraphProto, used: set[str]) -> None:
    from quantkit.graph.facts import subgraph_captures

    used = used | set(subgraph_captures(g))
    # deleted in place, last first: re-extending the kept ones deep-copied every weight
    for i in reversed([i for i, t in enumerate(g.initializer) if t.name not in used]):
        del g.initializer[i]
