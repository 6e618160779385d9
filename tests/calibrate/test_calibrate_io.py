"""Ranges / stats JSON files and the TensorRT calibration cache."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from quantkit.calibrate import (CALIBRATORS, HistogramStats, Ranges, check_ranges_match,
                                compute_ranges, load_ranges, load_stats, make_calibrator,
                                read_trt_calibration_cache, save_ranges, save_stats,
                                to_trt_calibration_cache)
from quantkit.errors import CalibrationError


def _stats() -> dict[str, HistogramStats]:
    rng = np.random.default_rng(0)
    return {
        "act/a": HistogramStats().observe(rng.standard_normal(5000).astype(np.float32)),
        "act:b": HistogramStats().observe(rng.laplace(size=5000).astype(np.float32) * 3),
        "zero": HistogramStats().observe(np.zeros(10, np.float32)),
        "mask": HistogramStats().observe(np.array([0.0, -np.inf], np.float32)),
    }


def _ranges(name: str = "entropy") -> Ranges:
    return compute_ranges(_stats(), {name: make_calibrator(name)}, samples_seen=42)[name]


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_ranges_json_round_trip(tmp_path, name):
    r = _ranges(name)
    path = save_ranges(r, tmp_path / "sub" / "ranges.json")
    assert load_ranges(path) == r
    assert [p.name for p in path.parent.iterdir()] == ["ranges.json"]  # no temp files left
    doc = json.loads(path.read_text())
    assert doc["format"] == "quantkit.ranges" and doc["excluded"] == {
        "mask": "non-finite values (n=1)"}


def test_save_overwrites_atomically(tmp_path):
    path = tmp_path / "r.json"
    save_ranges(_ranges("minmax"), path)
    save_ranges(_ranges("mse"), path)
    assert load_ranges(path).calibrator == "mse"


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.pop("amax"), "missing key"),
    (lambda d: d.update(format="other"), "not a quantkit ranges file"),
    (lambda d: d.update(version=99), "version"),
    (lambda d: d["amax"].update({"act/a": -1.0}), "amax must be"),
    (lambda d: d["amax"].update({"act/a": "big"}), "amax must be"),
    (lambda d: d.update(excluded={"act/a": "x"}), "both calibrated and excluded"),
    (lambda d: d.update(samples_seen=-3), "non-negative"),
    (lambda d: d.update(notes=[1]), "must be an object"),
])
def test_load_validates(tmp_path, mutate, match):
    d = _ranges().to_dict()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(CalibrationError, match=match) as err:
        load_ranges(path)
    assert str(path) in str(err.value)


def test_load_missing_or_corrupt(tmp_path):
    with pytest.raises(CalibrationError, match="not found"):
        load_ranges(tmp_path / "none.json")
    (tmp_path / "c.json").write_text("{not json")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_ranges(tmp_path / "c.json")
    (tmp_path / "l.json").write_text("[]")
    with pytest.raises(CalibrationError, match="JSON object"):
        load_ranges(tmp_path / "l.json")


def test_check_ranges_match():
    r = _ranges()
    check_ranges_match(r, ["act/a", "act:b", "zero", "mask"])  # excluded counts as known
    with pytest.raises(CalibrationError) as err:
        check_ranges_match(r, ["act/a", "other1", "other2"])
    assert "other1" in str(err.value) and "other2" in str(err.value)
    assert "2 of 3" in str(err.value)


def test_stats_json_round_trip(tmp_path):
    stats = _stats()
    back = load_stats(save_stats(stats, tmp_path / "stats.json"))
    assert back == stats
    (tmp_path / "bad.json").write_text(json.dumps({"format": "quantkit.stats",
                                                   "tensors": {"t": {"num_bins": 8}}}))
    with pytest.raises(CalibrationError, match="'t'"):
        load_stats(tmp_path / "bad.json")


def test_trt_cache_round_trip(tmp_path):
    r = _ranges()
    r.amax["unit"] = 127.0  # scale exactly 1.0
    path = to_trt_calibration_cache(r, tmp_path / "calib.cache")
    lines = path.read_text().splitlines()
    assert lines[0] == "TRT-8600-EntropyCalibration2"
    assert "unit: 3f800000" in lines
    assert not any(line.startswith("mask:") for line in lines)
    header, scales = read_trt_calibration_cache(path)
    assert header == lines[0] and list(scales) == list(r.amax)
    for t, amax in r.amax.items():
        expected = struct.unpack(">f", struct.pack(">f", amax / 127))[0]
        assert scales[t] == expected
        assert scales[t] * 127 == pytest.approx(amax, rel=1e-6)


def test_trt_cache_reader_rejects_garbage(tmp_path):
    p = tmp_path / "c.cache"
    p.write_text("hello\n")
    with pytest.raises(CalibrationError, match="TRT-"):
        read_trt_calibration_cache(p)
    p.write_text("TRT-8600-EntropyCalibration2\nx: zzzzzzzz\n")
    with pytest.raises(CalibrationError, match="invalid hex"):
        read_trt_calibration_cache(p)
    p.write_text("TRT-8600-EntropyCalibration2\nno separator\n")
    with pytest.raises(CalibrationError, match="8 hex"):
        read_trt_calibration_cache(p)
