"""Files for calibration results: Ranges / statistics as JSON, TensorRT calibration caches.

Writes are atomic (temp file in the same directory, then ``os.replace``). Loading
validates structure and raises CalibrationError saying what is wrong and where.

TensorRT calibration cache (the IInt8Calibrator text format): a header line such as
``TRT-8600-EntropyCalibration2`` followed by one ``tensor_name: xxxxxxxx`` line per
tensor, where the hex digits are the big-endian IEEE-754 float32 bits of the scale
``amax / 127``.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from quantkit.graph.grids import INT8_MAX
from quantkit.calibrate.ranges import Ranges
from quantkit.calibrate.histogram import HistogramStats
from quantkit.fsutil import atomic_write_text  # noqa: F401  (re-exported)
from quantkit.errors import CalibrationError

__all__ = ["save_ranges", "load_ranges", "save_stats", "load_stats", "check_ranges_match",
           "to_trt_calibration_cache", "read_trt_calibration_cache", "TRT_CACHE_HEADER"]

TRT_CACHE_HEADER = "TRT-8600-EntropyCalibration2"
_STATS_FORMAT = "quantkit.stats"


def _read_json(path: str | os.PathLike, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise CalibrationError(f"{what} file not found", where=str(p),
                               fix="run calibration first or fix the path")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{what} file is not valid JSON ({exc})", where=str(p),
                               fix="delete it and re-run calibration") from exc


def save_ranges(ranges: Ranges, path: str | os.PathLike) -> Path:
    """Write ``ranges`` as JSON (atomic)."""
    text = json.dumps(ranges.to_dict(), indent=1, sort_keys=False, allow_nan=False)
    return atomic_write_text(path, text + "\n")


def load_ranges(path: str | os.PathLike) -> Ranges:
    """Read and validate a ranges JSON file."""
    return Ranges.from_dict(_read_json(path, "ranges"), where=str(path))


def save_stats(stats: Mapping[str, HistogramStats], path: str | os.PathLike) -> Path:
    """Write per-tensor histogram statistics as JSON (atomic)."""
    doc = {"format": _STATS_FORMAT, "version": 1,
           "tensors": {t: s.to_dict() for t, s in stats.items()}}
    return atomic_write_text(path, json.dumps(doc, allow_nan=False) + "\n")


def load_stats(path: str | os.PathLike) -> dict[str, HistogramStats]:
    doc = _read_json(path, "statistics")
    if not isinstance(doc, dict) or doc.get("format") != _STATS_FORMAT \
            or not isinstance(doc.get("tensors"), dict):
        raise CalibrationError("not a quantkit statistics file", where=str(path),
                               fix="delete it and re-run calibration")
    out = {}
    for t, d in doc["tensors"].items():
        try:
            out[t] = HistogramStats.from_dict(d)
        except CalibrationError as exc:
            raise CalibrationError(f"bad statistics for tensor {t!r}: {exc.what}",
                                   where=str(path), value=exc.value,
                                   fix="delete it and re-run calibration") from exc
    return out


def check_ranges_match(ranges: Ranges, tensor_names: Iterable[str]) -> None:
    """Raise CalibrationError naming the tensors that ``ranges`` knows nothing about.

    A tensor is known if it has an amax or was explicitly excluded (with a reason).
    """
    names = list(dict.fromkeys(tensor_names))
    missing = [t for t in names if t not in ranges.amax and t not in ranges.excluded]
    if missing:
        more = f" (+{len(missing) - 10} more)" if len(missing) > 10 else ""
        shown = ", ".join(missing[:10]) + more
        raise CalibrationError(
            f"{len(missing)} of {len(names)} tensors have no calibrated range: {shown}",
            where=f"ranges[{ranges.calibrator}]", value=missing[:10],
            fix="re-run calibration for this model (the ranges may be from another model "
                "or another tensor selection)")


def _scale_hex(scale: float) -> str:
    return struct.pack(">f", scale).hex()


def to_trt_calibration_cache(ranges: Ranges, path: str | os.PathLike, *,
                             header: str = TRT_CACHE_HEADER) -> Path:
    """Write ``ranges`` as a TensorRT calibration cache (excluded tensors are omitted)."""
    if not header.startswith("TRT-") or "\n" in header:
        raise CalibrationError("TensorRT cache header must look like TRT-8600-EntropyCalibration2",
                               value=header)
    lines = [header]
    for t, amax in ranges.amax.items():
        if "\n" in t or "\r" in t:
            raise CalibrationError("tensor name contains a line break", value=t)
        scale = struct.unpack(">f", struct.pack(">f", amax / INT8_MAX))[0]
        if not math.isfinite(scale) or scale <= 0:
            raise CalibrationError("scale not representable as a positive float32",
                                   where=t, value=amax)
        lines.append(f"{t}: {_scale_hex(amax / INT8_MAX)}")
    return atomic_write_text(path, "\n".join(lines) + "\n")


def read_trt_calibration_cache(path: str | os.PathLike) -> tuple[str, dict[str, float]]:
    """``(header, {tensor: scale})`` from a TensorRT calibration cache (amax = 127 * scale)."""
    p = Path(path)
    if not p.is_file():
        raise CalibrationError("TensorRT calibration cache not found", where=str(p))
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("TRT-"):
        raise CalibrationError("not a TensorRT calibration cache (first line must start "
                               "with 'TRT-')", where=str(p),
                               value=lines[0][:60] if lines else "")
    scales: dict[str, float] = {}
    for n, line in enumerate(lines[1:], start=2):
        name, sep, hexbits = line.rpartition(": ")
        hexbits = hexbits.strip()
        if not sep or len(hexbits) != 8:
            raise CalibrationError("cache line must be 'tensor: <8 hex digits>'",
                                   where=f"{p}:{n}", value=line[:80])
        try:
            scales[name] = struct.unpack(">f", bytes.fromhex(hexbits))[0]
        except ValueError as exc:
            raise CalibrationError("cache line has invalid hex", where=f"{p}:{n}",
                                   value=hexbits) from exc
    return lines[0], scales
