"""Stage calibration on the tiny world: one pass, every calibrator, files a rerun can load."""

from __future__ import annotations

import dataclasses
import math

import pytest

from quantkit.errors import CalibrationError
from quantkit.record.serde import encode
from quantkit.run.scope import QuantScope
from quantkit.run.stages.calibration import calibration as calibrate


def test_ranges_for_every_calibrator_and_scope_tensor(ctx, scope, calibration):
    assert set(calibration.ranges) == {"minmax", "percentile", "entropy", "mse"}
    for r in calibration.ranges.values():
        assert set(r.amax) == set(scope.tensors)
        assert all(math.isfinite(v) and v > 0 for v in r.amax.values())
    mm, pc = calibration.ranges["minmax"].amax, calibration.ranges["percentile"].amax
    assert all(pc[t] <= mm[t] + 1e-6 for t in mm)  # a percentile never exceeds the max
    rec = encode(calibration.to_record())
    assert rec["tensors"] == 2 and rec["quant_nodes"] == 2 and rec["samples"] == 32
    assert (ctx.run_dir / rec["files"]["mse"]).is_file()


def test_saved_ranges_reload_without_a_pass(ctx, sources, calibration):
    files = [str(ctx.run_dir / f) for f in calibration.record.files.values()]
    s = ctx.settings
    c = dataclasses.replace(ctx, settings=dataclasses.replace(
        s, calibrator=dataclasses.replace(s.calibrator, ranges_files=files)))
    loaded = calibrate(c, sources)
    assert loaded.record.loaded_from == files
    assert loaded.ranges["entropy"].amax == calibration.ranges["entropy"].amax


def test_an_empty_scope_is_one_clear_error(ctx, sources):
    empty = dataclasses.replace(sources.int8.scope, targets=(), tensors=())
    assert isinstance(empty, QuantScope)
    with pytest.raises(CalibrationError, match="no tensors in the quantization scope"):
        calibrate(ctx, dataclasses.replace(
            sources, int8=dataclasses.replace(sources.int8, scope=empty)))
