"""The report's latency table and cost projection, from latency measured for real (tiny ONNX
graphs on ONNX Runtime CPU) and attached to the trimmed real record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hydra import compose, initialize_config_dir
from onnx import TensorProto, helper, numpy_helper

from quantkit.bench import measure_latency
from quantkit.report.render import build_context, render_reports
from quantkit.settings import build, register

CONF = Path(__file__).resolve().parents[2] / "conf"


def _chain(depth: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((32, 32)) * 0.1).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        prev = f"m{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 32])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    d = tmp_path_factory.mktemp("lat")
    paths = {}
    for name, depth in (("fp32", 4), ("fp16", 4), ("int8.minmax", 30)):
        paths[name] = str(d / f"{name}.onnx")
        onnx.save(_chain(depth), paths[name])
    register()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        s = build(compose(config_name="config", overrides=[
            "experiment=bert_int8", "bench.batch_sizes=[1,8]", "bench.min_repeats=20",
            "bench.repeats=40", "bench.max_seconds=0.1", "bench.n_boot=200",
            "bench.target_qps=2500", "bench.p99_budget_ms=1000"]))

    def feeds(b):
        yield {"x": np.ones((b, 32), np.float32)}

    return measure_latency(s, paths, feeds)


@pytest.fixture
def record_lat(record, measured):
    for name, per in measured["candidates"].items():
        record["candidates"][name]["latency"] = per
    record["latency"] = measured["summary"]
    return record


def test_latency_table_with_intervals_and_labels(record_lat, measured, tmp_path):
    paths = render_reports(record_lat, tmp_path)
    md, html = (paths[f].read_text() for f in ("md", "html"))
    for text in (md, html):
        assert "Latency: not measured" not in text
        assert "ONNX Runtime CPU" in text and "NOT a prediction of TensorRT" in text
        assert "Cost projection" in text and "saving vs FP32" in text
    p50 = measured["candidates"]["fp32"]["8"]["p50_ms"]
    assert f"{p50:.3f} [" in md  # the point and its interval
    assert "| `int8.minmax` | 8 |" in md and "| `fp32` | 1 |" in md
    # 30 MatMuls vs 4: the INT8-named candidate is slower than FP16 and the report says so
    assert "INT8 NOT FASTER than FP16" in md and "INT8 NOT FASTER than FP16" in html
    assert "**INT8 not faster than FP16**" in md
    assert "Inputs: batch 1: x [1, 32]; batch 8: x [8, 32]." in md  # what was timed


def test_cost_rows_match_the_record(record_lat, measured):
    ctx = build_context(record_lat, with_plots=False)
    rows = {r["name"]: r for r in ctx["latency_info"]["cost"]["rows"]}
    assert set(rows) == {"fp32", "fp16", "int8.minmax"}
    for name, r in rows.items():
        c = measured["summary"]["cost"]["per_candidate"][name]
        assert r["instances"].split()[0] == str(c["instances"]) and r["batch"] == "8"
    assert rows["fp32"]["saving"].startswith("0.0%")
    assert ctx["latency_info"]["target"] == "tensorrt"


def test_budget_nothing_fits_is_said(record_lat):
    cost = record_lat["latency"]["cost"]["per_candidate"]["fp16"]
    cost.update({"fits_budget": False, "instances": None, "batch_size": None,
                 "reason": "no measured batch size has P99 <= 0.001 ms"})
    ctx = build_context(record_lat, with_plots=False)
    row = next(r for r in ctx["latency_info"]["cost"]["rows"] if r["name"] == "fp16")
    assert row["instances"] == "—" and "P99 <= 0.001 ms" in row["note"]


def test_report_is_deterministic_for_one_record(record_lat, tmp_path):
    a = render_reports(record_lat, tmp_path / "a")
    b = render_reports(record_lat, tmp_path / "b")
    for f in ("md", "html"):
        assert a[f].read_bytes() == b[f].read_bytes()


def test_fp32_outside_the_budget_is_said_once(record_lat, tmp_path):
    per = record_lat["latency"]["cost"]["per_candidate"]
    per["fp32"].update({"fits_budget": False, "instances": None, "batch_size": None,
                        "reason": "no measured batch size has P99 <= 1 ms"})
    for name in ("fp32", "fp16", "int8.minmax"):  # as the stage writes it then
        per[name].update({"saving_vs_fp32": None, "instances_saved_vs_fp32": None})
    ctx = build_context(record_lat, with_plots=False)
    rows = {r["name"]: r for r in ctx["latency_info"]["cost"]["rows"]}
    assert rows["int8.minmax"]["saving"] == "FP32 cannot meet the budget"
    assert rows["fp32"]["saving"] == "—" and "P99 <= 1 ms" in rows["fp32"]["note"]
    md = render_reports(record_lat, tmp_path, formats=["md"])["md"].read_text()
    assert md.count("FP32 fits no measured batch size within the P99 budget") == 1
