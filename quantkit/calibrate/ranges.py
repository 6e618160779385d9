"""`Ranges`: one calibrator's per-tensor amax, plus what was excluded and why.

``compute_ranges`` turns streamed `HistogramStats` into one `Ranges` per calibrator.
Tensors that carried any non-finite value are excluded (TRT_RULES.md rule 9); all-zero
tensors get a safe amax and a note. Pure python/numpy, no I/O (see ``io.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from quantkit.calibrate.calibrators import Calibrator
from quantkit.graph.grids import INT8_MAX
from quantkit.calibrate.histogram import DEFAULT_NUM_BINS, HistogramStats
from quantkit.errors import CalibrationError

__all__ = ["Ranges", "compute_ranges", "RANGES_FORMAT", "RANGES_VERSION"]

RANGES_FORMAT = "quantkit.ranges"
RANGES_VERSION = 1


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass
class Ranges:
    """Per-tensor symmetric amax from one calibrator (scale = amax / 127).

    ``excluded`` maps tensors that must not be quantized to the reason; ``notes`` records
    fallbacks (e.g. all-zero); ``summary`` holds each tensor's histogram summary
    (count, amax, p99/p99_9/p99_99, mean, std, ...); ``spread`` optional bootstrap
    spread of amax (see ``bootstrap.py``).
    """

    calibrator: str
    params: dict[str, Any]
    amax: dict[str, float]
    samples_seen: int = 0
    method: str = ""
    num_bins: int = DEFAULT_NUM_BINS
    excluded: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)
    spread: dict[str, dict[str, float]] = field(default_factory=dict)

    def __contains__(self, tensor: object) -> bool:
        return tensor in self.amax

    def scale(self, tensor: str) -> float:
        """INT8 scale of ``tensor`` (amax / 127); CalibrationError if it has no range."""
        if tensor not in self.amax:
            reason = self.excluded.get(tensor)
            raise CalibrationError(
                "tensor has no calibrated range" + (f" (excluded: {reason})" if reason else ""),
                where=f"ranges[{self.calibrator}]", value=tensor,
                fix="do not quantize it, or re-calibrate with this tensor selected")
        return self.amax[tensor] / INT8_MAX

    def scales(self) -> dict[str, float]:
        return {t: a / INT8_MAX for t, a in self.amax.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"format": RANGES_FORMAT, "version": RANGES_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, d: Any, *, where: str = "ranges") -> "Ranges":
        """Validate and build; CalibrationError says which key is wrong."""
        def bad(what: str, key: str, value: object = None) -> CalibrationError:
            return CalibrationError(what, where=f"{where}:{key}", value=value,
                                    fix="re-run calibration to regenerate the ranges file")

        if not isinstance(d, Mapping):
            raise bad("ranges must be a JSON object", "<root>", type(d).__name__)
        if d.get("format") != RANGES_FORMAT:
            raise bad(f"not a quantkit ranges file (format must be {RANGES_FORMAT!r})",
                      "format", d.get("format"))
        if d.get("version") != RANGES_VERSION:
            raise bad(f"unsupported ranges version (expected {RANGES_VERSION})", "version",
                      d.get("version"))
        for key in ("calibrator", "params", "amax"):
            if key not in d:
                raise bad("missing key", key)
        if not isinstance(d["calibrator"], str):
            raise bad("calibrator must be a string", "calibrator", d["calibrator"])
        if not _NAME.match(d["calibrator"]) or ".." in d["calibrator"]:
            # it names artifacts (model.int8.<calibrator>.onnx): it must stay in the run dir
            raise bad("calibrator must be a plain name (letters, digits, _ . -)", "calibrator",
                      d["calibrator"])
        for key in ("params", "amax", "excluded", "notes", "summary", "spread"):
            if key in d and not isinstance(d[key], Mapping):
                raise bad("must be an object", key, type(d[key]).__name__)
        amax: dict[str, float] = {}
        for t, a in d["amax"].items():
            if isinstance(a, bool) or not isinstance(a, (int, float)) \
                    or not math.isfinite(a) or a <= 0:
                raise bad("amax must be a finite number > 0", f"amax.{t}", a)
            amax[str(t)] = float(a)
        for key in ("excluded", "notes"):
            for t, v in d.get(key, {}).items():
                if not isinstance(v, str):
                    raise bad("must map tensor names to strings", f"{key}.{t}", v)
        for key in ("samples_seen", "num_bins"):
            v = d.get(key, 0 if key == "samples_seen" else DEFAULT_NUM_BINS)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise bad("must be a non-negative integer", key, v)
        both = sorted(set(amax) & set(d.get("excluded", {})))
        if both:
            raise bad("tensors both calibrated and excluded", "excluded", both[:5])
        return cls(calibrator=d["calibrator"], params=dict(d["params"]), amax=amax,
                   samples_seen=int(d.get("samples_seen", 0)), method=str(d.get("method", "")),
                   num_bins=int(d.get("num_bins", DEFAULT_NUM_BINS)),
                   excluded=dict(d.get("excluded", {})), notes=dict(d.get("notes", {})),
                   summary={k: dict(v) for k, v in d.get("summary", {}).items()},
                   spread={k: dict(v) for k, v in d.get("spread", {}).items()})


#: |x| at or above this is a sentinel, not a signal: attention masks carry finfo(float32).min
#: (-3.4e38) where older exporters wrote -inf. An INT8 scale for it would zero every real value.
SENTINEL_ABS = 1e30


def exclusion_reason(stats: HistogramStats) -> str | None:
    """Why a tensor must not be quantized, or None."""
    if stats.n_nonfinite_:
        return f"non-finite values (n={stats.n_nonfinite_})"
    if stats.amax_ >= SENTINEL_ABS:
        return (f"sentinel values (|x| up to {stats.amax_:.3g}, e.g. an attention mask's "
                "finfo.min): INT8 cannot represent them")
    if stats.count_ == 0:
        return "no values observed"
    return None


def compute_ranges(stats: Mapping[str, HistogramStats],
                   calibrators: Mapping[str, Calibrator], *,
                   samples_seen: int = 0,
                   spread: Mapping[str, Mapping[str, Any]] | None = None
                   ) -> dict[str, Ranges]:
    """One `Ranges` per entry of ``calibrators`` (keyed like it) from the same statistics.

    ``spread`` is ``bootstrap_ranges(...)``'s result; when given, each Ranges carries its
    calibrator's per-tensor spread (as plain dicts).
    """
    if not calibrators:
        raise CalibrationError("no calibrators given", where="compute_ranges",
                               fix="pass e.g. {'entropy': make_calibrator('entropy')}")
    bins = {s.num_bins for s in stats.values()}
    num_bins = bins.pop() if len(bins) == 1 else DEFAULT_NUM_BINS
    summary = {t: s.summary() for t, s in stats.items()}
    excluded = {t: r for t, s in stats.items() if (r := exclusion_reason(s)) is not None}
    out: dict[str, Ranges] = {}
    for key, cal in calibrators.items():
        amax: dict[str, float] = {}
        notes: dict[str, str] = {}
        for t, s in stats.items():
            if t in excluded:
                continue
            amax[t], note = cal.compute_amax_with_note(s)
            if note:
                notes[t] = note
        sp = {}
        if spread and key in spread:
            sp = {t: (v.to_dict() if hasattr(v, "to_dict") else dict(v))
                  for t, v in spread[key].items()}
        out[key] = Ranges(calibrator=key, params=cal.get_params(), amax=amax,
                          samples_seen=int(samples_seen), method=cal.name,
                          num_bins=num_bins,
                          excluded=dict(excluded), notes=notes, summary=dict(summary),
                          spread=sp)
    return out
