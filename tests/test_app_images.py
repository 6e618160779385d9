"""Every stage of a run on image data (fast): your own CNN ONNX + a folder of images.

A small residual CNN (Conv -> Relu -> Conv -> Add(skip) -> pool -> Gemm) that tells dark
from bright images, real PNG files read with Pillow, real ONNX Runtime sessions: the run
must calibrate, write linted Q/DQ artifacts with the residual Add's skip input quantized,
evaluate with verdicts, compare per layer, search and write the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import quantkit
from onnx_graphs import save_cnn


def residual_cnn(path: Path, *, batch: str | int = "batch") -> None:
    rng = np.random.default_rng(0)
    w1 = np.abs(rng.standard_normal((16, 3, 3, 3))).astype(np.float32) * 0.1
    w2 = (rng.standard_normal((16, 16, 1, 1)) * 0.2).astype(np.float32)
    fc = np.stack([np.ones(16), -np.ones(16)]).astype(np.float32) / 2  # class 0 = bright
    inits = {"w1": w1, "b1": np.zeros(16, np.float32), "w2": w2, "fc": fc,
             "fb": np.array([-2.0, 2.0], np.float32)}
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="residual_add"),
             helper.make_node("GlobalAveragePool", ["a"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="head", transB=1)]
    save_cnn(nodes, inits, path, "residual_cnn", batch=batch)


def image_folder(root: Path, n_per_class: int = 40) -> None:
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(1)
    for label, (lo, hi) in (("bright", (150, 256)), ("dark", (0, 100))):
        (root / label).mkdir(parents=True)
        for i in range(n_per_class):
            px = rng.integers(lo, hi, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(px).save(root / label / f"{i:03d}.png")


def test_run_on_an_image_folder_with_your_own_cnn(tmp_path):
    from quantkit.qdq.qdq_map import QdqMap
    from quantkit.qdq.lint import lint_qdq

    residual_cnn(tmp_path / "cnn.onnx")
    image_folder(tmp_path / "images")
    overrides = ["model=onnx", f"model.path={tmp_path / 'cnn.onnx'}", "data=image_folder",
                 f"data.path={tmp_path / 'images'}", "data.image.size=16", "data.eval_fraction=0.5",
                 "data.calib.num_samples=16", f"cache_dir={tmp_path / 'cache'}", "progress=false",
                 "report.formats=[json,md]", "verdict.n_boot=200", "compare.subset=16",
                 "compare.backend_check_subset=16", "precision.search.subset=16",
                 "bench.enabled=false", "experiment_name=images"]
    out = tmp_path / "run"
    rec = quantkit.run(overrides=overrides, run_dir=out)

    assert rec.data.kind == "image" and rec.data.sizes == {"train": 8, "calib": 16, "dev": 16, "test": 40}
    assert rec.data.label_names == ["bright", "dark"]
    assert rec.data.feeds["preprocess"]["size"] == 16
    written = rec.to_dict()  # record.json as the run writes it
    cands = written["candidates"]
    assert cands["fp32"]["metrics"]["accuracy"] == 1.0  # the CNN tells dark from bright
    assert set(cands["fp32"]["slices"]) == {"class"}  # images have no length slice
    # the skip input of the residual Add was calibrated with the Conv/Gemm inputs
    assert "r1" in rec.calibration.amax["minmax"] and rec.calibration.quant_nodes == 3
    for m in ("minmax", "percentile", "entropy", "mse"):
        c = cands[f"int8.{m}"]
        assert c["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE")
        # both Convs INT8; the 2-class Gemm head is a small GEMM (N=2, TRT rule 10): FP16
        assert c["plan_counts"]["int8"] == 2 and c["lint"]["violations"] == 0
        assert c["metrics"]["accuracy"] >= 0.9
        assert c["layers"] and all(v["count"] > 0 for v in c["layers"].values())
        art = onnx.load(str(out / f"model.int8.{m}.onnx"))
        assert lint_qdq(art) == []
        prod = {o: n for n in art.graph.node for o in n.output}
        add = next(n for n in art.graph.node if n.name == "residual_add")
        # TRT rule 6: the skip branch reaches the Add through its own Q -> DQ pair
        skip = next(t for t in add.input if prod[t].op_type == "DequantizeLinear")
        assert prod[prod[skip].input[0]].op_type == "QuantizeLinear"
        qmap = QdqMap.from_dict(json.loads((out / "plans" / f"int8.{m}.qdqmap.json").read_text()))
        assert qmap.original(skip) == "r1" and qmap.consumer(skip) == "residual_add"
        for conv in (n for n in art.graph.node if n.op_type == "Conv"):  # per-channel weights, axis 0
            wdq = prod[conv.input[1]]
            assert wdq.op_type == "DequantizeLinear"
            assert {a.name: a.i for a in wdq.attribute}.get("axis", 1) == 0
    assert "mixed" in cands and (out / "record.json").is_file() and (out / "report.md").is_file()


def test_a_model_with_a_fixed_batch_of_one_runs_with_no_setting(tmp_path):
    """A CNN exported with a fixed batch of 1 (as detectors often are) runs every stage with
    the default batch sizes: fed one image at a time, timed at batch 1 only."""
    import quantkit

    residual_cnn(tmp_path / "cnn.onnx", batch=1)
    image_folder(tmp_path / "images", n_per_class=20)
    rec = quantkit.run([
        "model=onnx", f"model.path={tmp_path / 'cnn.onnx'}", "data=image_folder",
        f"data.path={tmp_path / 'images'}", "data.image.size=16", "data.eval_fraction=0.5",
        "data.calib.num_samples=8", f"cache_dir={tmp_path / 'cache'}", "progress=false",
        "report.formats=[json]", "verdict.n_boot=100", "compare.subset=4",
        "compare.backend_check_subset=4", "precision.search.enabled=false",
        "bench.feeds=1", "bench.warmup=1", "bench.min_repeats=1", "bench.repeats=2",
        "experiment_name=fixed1"],
        run_dir=tmp_path / "run")
    assert rec.data.feeds["fixed_batch"] == 1
    assert rec.candidates["fp32"].metrics.accuracy == 1.0
    assert {int(b) for b in rec.candidates["fp32"].latency} == {1}  # batch 1 only
    assert rec.candidates["int8.minmax"].plan_counts["int8"] == 2
