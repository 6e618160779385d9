"""A user model's identity for the test ledger survives a re-export (quantkit/models/
fingerprint.py): the same network saved again with renamed nodes and tensors, initializers
in another order and a weight stored transposed, exported at another opset, or re-exported
from torch, is the same model; another network is not. Real ONNX graphs, real ORT sessions,
a real torch export."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from quantkit.models.fingerprint import fingerprint_model, weights_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
import tinyworld  # noqa: E402  (tests/reliability: the tiny real models)


def _renamed_and_reordered(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same network saved again: every node and initializer renamed, initializers
    reversed, w1 stored transposed behind a Transpose node, producer changed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rename = {i.name: f"exported::{i.name}::{k}" for k, i in enumerate(g.initializer)}
    w1 = next(i for i in g.initializer if i.name == "w1")
    t = numpy_helper.from_array(numpy_helper.to_array(w1).T.copy(), rename["w1"] + "_t")
    inits = [t if i.name == "w1" else i for i in g.initializer][::-1]
    for i in inits:
        if i.name in rename:
            i.name = rename[i.name]
    del g.initializer[:]
    g.initializer.extend(inits)
    for k, node in enumerate(g.node):
        node.name = f"/block{k}/{node.op_type}"
        for j, x in enumerate(node.input):
            if x in rename:
                node.input[j] = rename[x]
    g.node.insert(0, helper.make_node("Transpose", [rename["w1"] + "_t"], [rename["w1"]],
                                      perm=[1, 0], name="/w1/transpose"))
    m.producer_name = "another-exporter"
    onnx.checker.check_model(m)
    return m


def test_a_re_saved_graph_is_the_same_model_and_another_network_is_not():
    base = fingerprint_model(tinyworld.text_model())
    again = fingerprint_model(_renamed_and_reordered(tinyworld.text_model()))
    assert again.weights_sha256 == base.weights_sha256 and again.matches(base)
    older = fingerprint_model(tinyworld.text_model(opset=12))  # axes as attributes
    assert older.matches(base) and older.key() == base.key()
    other = fingerprint_model(tinyworld.text_model(seed=1))
    assert not other.matches(base) and other.key() != base.key()
    assert base.probe and base.probe_error is None and base.n_weights == 4


def test_the_weights_digest_ignores_names_order_and_layout_but_not_values():
    m = tinyworld.text_model()
    d, n = weights_digest(m)
    assert weights_digest(_renamed_and_reordered(m)) == (d, n)
    changed = onnx.ModelProto()
    changed.CopyFrom(m)
    w2 = next(i for i in changed.graph.initializer if i.name == "w2")
    a = numpy_helper.to_array(w2).copy()
    a[0, 0] += 1e-3
    w2.CopyFrom(numpy_helper.from_array(a, "w2"))
    assert weights_digest(changed)[0] != d


def test_a_model_re_exported_from_torch_is_the_same_model(tmp_path):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self, seed: int) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.emb = torch.nn.Embedding(30, 8)
            self.fc = torch.nn.Linear(8, 3)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=g))

        def forward(self, ids, mask):
            x = self.emb(ids) * mask.unsqueeze(-1).float()
            return self.fc(x.sum(1) / mask.sum(1, keepdim=True).float())

    ids = torch.zeros((2, 5), dtype=torch.long)
    mask = torch.ones((2, 5), dtype=torch.long)
    paths = {}
    for tag, seed, opset, names in [("a", 0, 17, ["input_ids", "attention_mask"]),
                                    ("b", 0, 14, ["ids", "mask"]),
                                    ("c", 1, 17, ["input_ids", "attention_mask"])]:
        paths[tag] = tmp_path / f"{tag}.onnx"
        torch.onnx.export(Net(seed).eval(), (ids, mask), str(paths[tag]), input_names=names,
                          output_names=["logits"], opset_version=opset, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    a, b, c = (fingerprint_model(paths[t]) for t in "abc")
    assert paths["a"].read_bytes() != paths["b"].read_bytes()  # another file
    assert a.matches(b) and b.matches(a) and a.probe and b.probe
    assert not a.matches(c)  # another network (other weights)


def test_a_model_the_probe_cannot_feed_is_identified_by_its_weights():
    m = tinyworld.text_model()
    m.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.STRING
    fp = fingerprint_model(m)
    assert fp.probe == () and fp.probe_error and fp.weights_sha256 == weights_digest(m)[0]
    assert fp.matches(fingerprint_model(tinyworld.text_model()))  # weights alone decide
    assert np.isfinite(fp.n_weights)
