"""The whole edit chain on a PyTorch export (transformer layer with a finfo.min mask + CNN).

build_plan -> insert_qdq -> convert_fp16 / emulate_fp16 -> lint, every artifact run in real
ORT. Regression for two things found on real exports: the mask constant (-3.4e38) must stay
FP32, and ORT 1.32 (NchwcTransformer) crashed on an FP16 graph written without value_info.
"""

import numpy as np
import onnx
import pytest

from qdq_graphs import all_tensor_names, max_abs_ranges, run, sqnr_db
from quantkit.precision.plan import Precision, build_plan
from quantkit.qdq.casts import convert_fp16, emulate_fp16, fp16_overflow_nodes
from quantkit.qdq.insert import insert_qdq
from quantkit.qdq.placement import residual_add_inputs
from quantkit.qdq.lint import lint_qdq

torch = pytest.importorskip("torch", reason="torch exports the real-world graph")


def _export(path):
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(100, 64)
            self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
            self.conv = torch.nn.Sequential(
                torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                torch.nn.Conv2d(32, 32, 3, padding=1, groups=32), torch.nn.ReLU(),
                torch.nn.Conv2d(32, 32, 1))
            self.head = torch.nn.Linear(96, 10)

        def forward(self, ids, mask, img):
            am = (1.0 - mask[:, None, :].float()) * torch.finfo(torch.float32).min
            am = am.repeat_interleave(4, 0).expand(-1, ids.shape[1], -1)
            h = self.layer(self.emb(ids), src_mask=am)
            c = self.conv(img) + img.mean(1, keepdim=True)  # broadcast Add: not residual
            return self.head(torch.cat([h.mean(1), c.mean((2, 3))], -1))

    ids = torch.randint(0, 100, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    img = torch.randn(2, 3, 16, 16)
    torch.onnx.export(Net().eval(), (ids, mask, img), str(path), opset_version=17, dynamo=False,
                      input_names=["ids", "mask", "img"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "B"}, "mask": {0: "B"}, "img": {0: "B"}})
    return onnx.load(str(path))


def _feed(seed):
    r = np.random.default_rng(seed)
    mask = np.ones((4, 12), np.int64)
    mask[:, 8:] = 0
    return {"ids": r.integers(0, 100, (4, 12)).astype(np.int64), "mask": mask,
            "img": r.standard_normal((4, 3, 16, 16)).astype(np.float32)}


def test_int8_fp16_pipeline_on_a_pytorch_export(tmp_path):
    model = _export(tmp_path / "net.onnx")
    feeds = [_feed(s) for s in range(4)]
    amax = max_abs_ranges(model, feeds)
    overflow = fp16_overflow_nodes(model, amax)
    softmax = next(n.name for n in model.graph.node if n.op_type == "Softmax")
    assert softmax in overflow  # reads scores + (-3.4e38) mask

    plan = build_plan(model, amax=amax, fp32_nodes_reasons=overflow, calibrator="max")
    assert plan.decisions[softmax].precision is Precision.FP32
    int8_ops = {n.op_type for n in model.graph.node if n.name in plan.int8_nodes()}
    assert int8_ops == {"MatMul", "Gemm", "Conv"} and len(plan.int8_nodes()) >= 6
    assert residual_add_inputs(model, plan) == []

    q, qmap = insert_qdq(model, plan)
    mixed = convert_fp16(q, plan)
    fp16_plan = build_plan(model, amax={}, fp32_nodes_reasons=overflow)
    fp16, emu = convert_fp16(model, fp16_plan), emulate_fp16(model, fp16_plan)
    for m in (q, mixed, fp16, emu):
        onnx.checker.check_model(m, full_check=True)
    assert lint_qdq(q) == [] and lint_qdq(mixed) == []
    typed = {vi.name for vi in fp16.graph.value_info}
    assert set(all_tensor_names(fp16)) - {i.name for i in fp16.graph.input} - {"logits"} <= typed

    ref = run(model, feeds[0])["logits"]
    results = {name: run(m, feeds[0], qdq=True)["logits"]
               for name, m in (("int8", q), ("int8+fp16", mixed), ("fp16", fp16), ("emulated fp16", emu))}
    for name, out in results.items():
        assert np.all(np.isfinite(out)), name
    assert sqnr_db(ref, results["int8"]) > 30
    assert sqnr_db(ref, results["int8+fp16"]) > 30
    assert sqnr_db(ref, results["fp16"]) > 50 and sqnr_db(ref, results["emulated fp16"]) > 50
