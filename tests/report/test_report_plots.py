"""Plots: PNG bytes from record data, deterministic, skipped when the data is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from builders import bare_record

from quantkit.report import plots

RECORD_SMALL = Path(__file__).with_name("data") / "record_small.json"

PNG = b"\x89PNG\r\n\x1a\n"


def test_all_plots_of_the_real_record(record):
    out = plots.all_plots(record)
    assert [p.name for p in out] == ["delta", "sqnr", "activations"]
    for p in out:
        assert p.png.startswith(PNG) and len(p.png) > 5_000
        assert b"Software" not in p.png  # no tool/version metadata in the file


def test_plots_are_deterministic(record):
    a = [p.png for p in plots.all_plots(record)]
    b = [p.png for p in plots.all_plots(record)]
    assert a == b


def test_plots_do_not_touch_pyplot_or_the_display():
    code = ("import json, sys; from quantkit.report import plots; "
            "r = json.load(open(sys.argv[1])); assert len(plots.all_plots(r)) == 3; "
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MPLBACKEND"] = "TkAgg"  # would fail without a display if anything used pyplot
    r = subprocess.run([sys.executable, "-c", code, str(RECORD_SMALL)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr


def test_missing_data_gives_no_plot(record):
    record["calibration"] = {}
    record["search"] = {}
    assert plots.activation_summary(record) is None
    assert plots.pareto(record) is None
    for c in record["candidates"].values():
        c.pop("layers", None)
        c.pop("verdict", None)
    assert plots.sqnr_per_layer(record) is None
    assert plots.delta_ci(record) is None
    assert plots.all_plots(bare_record()) == []


def test_worst_calibrated_tensors_follow_the_recommended_candidate(record):
    tensors, how = plots.worst_calibrated_tensors(record, top_n=3)
    layers = record["candidates"]["int8.minmax"]["layers"]
    cal = record["calibration"]["summary"]
    expected = sorted((t for t in cal if t in layers), key=lambda t: layers[t]["sqnr_db"])[:3]
    assert tensors == expected and "int8.minmax" in how


def test_sqnr_plot_survives_missing_values(record):
    layers = record["candidates"]["int8.mse"]["layers"]
    first = next(iter(layers))
    layers[first]["sqnr_db"] = None
    record["candidates"].pop("fp16")  # no floor candidate: use the flagged entries' floor
    p = plots.sqnr_per_layer(record)
    assert p is not None and p.png.startswith(PNG)


@pytest.mark.parametrize("intervals", [
    ([-0.01, 0.01], [-0.02, 0.0], [-0.02, 0.0]),   # delta intervals: own panel
    ([0.76, 0.78], [0.69, 0.71], [0.74, 0.76]),    # metric intervals: error bars
])
def test_pareto_plot_from_search(record_search, intervals):
    ev0 = record_search["search"]["evaluations"][0]
    evals = []
    for i, (fp16, status, metric) in enumerate([(["a"], "PASS", 0.77), ([], "FAIL", 0.70),
                                                (["a", "b", "c"], "INCONCLUSIVE", 0.75)]):
        e = json.loads(json.dumps(ev0))
        e.update(index=i, fp16_set=fp16, fp16_count=len(fp16), status=status, metric=metric,
                 interval=intervals[i])
        evals.append(e)
    record_search["search"].update(evaluations=evals, pareto=[
        {"fp16_count": 1, "metric": 0.77, "status": "PASS", "fp16_set": ["a"], "k": 1,
         "index": 0}])
    p = plots.pareto(record_search)
    assert p is not None and p.png.startswith(PNG)
    assert ("lower panel" in p.caption) == (intervals[0][0] < 0)
