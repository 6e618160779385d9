"""Stage latency: timings per candidate, reused from the stage cache on this host."""

from __future__ import annotations

import dataclasses

from quantkit.cache import StageCache
from quantkit.run.stages.latency import latency as measure


def test_latency_measured_then_reused(ctx, artifacts, tmp_path):
    s = ctx.settings
    bench = dataclasses.replace(s.bench, enabled=True, batch_sizes=[1, 2], min_repeats=3,
                                repeats=4, max_seconds=0.0, n_boot=50)
    c = dataclasses.replace(ctx, settings=dataclasses.replace(s, bench=bench),
                            cache=StageCache(tmp_path / "stages"))
    models = {"fp32": ctx.model.path, "int8.mse": artifacts["int8.mse"].path}
    shas = {"fp32": ctx.model.sha256, "int8.mse": artifacts["int8.mse"].sha256}
    first = measure(c, models, shas)
    assert set(first.candidates) == set(models)
    assert set(first.candidates["fp32"]) == {"1", "2"}
    assert first.to_record().label.device == "CPU"
    again = measure(c, models, shas)
    for name in models:
        assert all(st["reused"] for st in again.candidates[name].values())
        assert again.candidates[name]["1"]["p50_ms"] == first.candidates[name]["1"]["p50_ms"]
