"""Formatting helpers shared by the reports: numbers, intervals, statuses, atomic writes.

Pure string formatting of values that are already in a RunRecord; nothing here measures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from quantkit.record.serde import JsonValue
from quantkit.record.verdict import Interval
from quantkit.verdict.outcome import FAIL, INCONCLUSIVE, PASS

#: a value the report formats: a recorded JSON value (numbers, text, lists, objects)
Value = JsonValue

DASH = "—"
NOT_MEASURED = "not measured"

#: Verdict statuses best first for a reader (INCONCLUSIVE before FAIL); anything else ranks
#: after them. The statuses themselves are quantkit.verdict.outcome's.
STATUS_ORDER = (PASS, INCONCLUSIVE, FAIL)


def status_rank(status: Value) -> int:
    """0 for PASS, 1 for INCONCLUSIVE, 2 for FAIL, 3 for anything else (missing, SKIPPED)."""
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def status_class(status: Value) -> str:
    """CSS class for a verdict status."""
    return {"PASS": "pass", "INCONCLUSIVE": "inconclusive", "FAIL": "fail"}.get(status, "other")


def is_number(x: Value) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite(x: Value) -> bool:
    return is_number(x) and math.isfinite(x)


def num(x: Value, digits: int = 4) -> str:
    """A number with ``digits`` decimals; ints as ints; None as a dash."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return f"{x:.{digits}f}"
    return str(x)


def signed(x: Value, digits: int = 4) -> str:
    """A number with an explicit sign (+0.0016, -0.0117)."""
    if not finite(x):
        return num(x, digits)
    return f"{x:+.{digits}f}"


def sig(x: Value, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (p-values, ratios, KL)."""
    if not finite(x):
        return num(x)
    return f"{x:.{digits}g}"


def pct(x: Value, digits: int = 2) -> str:
    """A fraction as a percentage (0.0123 -> 1.23%)."""
    if not finite(x):
        return num(x)
    return f"{100 * x:.{digits}f}%"


def interval(delta: Interval | None, digits: int = 4, *, level: bool = True) -> str:
    """``+0.1 [-0.2, +0.4] (95% CI)`` (``digits=1``) from a recorded interval (point, low,
    high, level); "not measured" for None.

    ``level=False`` leaves out the "(95% CI)" suffix (for table columns that say it once).
    """
    if delta is None or delta.point is None:
        return NOT_MEASURED
    out = signed(delta.point, digits)
    if delta.low is not None or delta.high is not None:
        out += f" [{signed(delta.low, digits)}, {signed(delta.high, digits)}]"
    if level and finite(delta.level):
        out += f" ({delta.level * 100:g}% CI)"
    return out


def text(x: Value) -> str:
    """A recorded value as text: a dash for nothing, lists joined, booleans as yes / no."""
    if x is None or x == "":
        return DASH
    if isinstance(x, (list, tuple)):
        return ", ".join(str(v) for v in x) if x else DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    return str(x)


def cfg(x: Value) -> str:
    """A configured value as written (0.01, 10, 2000), not padded to fixed decimals."""
    return f"{x:g}" if finite(x) and not isinstance(x, bool) else text(x)


def value_text(v: Value) -> str:
    """A value of any kind: floats to 4 decimals, pairs as [a, b], collections counted."""
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(is_number(x) for x in v):
        return f"[{num(v[0])}, {num(v[1])}]"
    if isinstance(v, (list, tuple, Mapping)):
        return f"{len(v)} entries (see report.json)"
    return text(v)


def alpha_text(a: Value) -> str:
    """A one-sided alpha with 4 significant digits (a look's alpha may be 0.000225)."""
    return f"{a:.4g}" if finite(a) else value_text(a)


def with_ci(value: Value, ci: Value, digits: int) -> str:
    """``1.23 [1.10, 1.40]`` (``digits=2``): ``value`` and, when both ends are finite, its
    interval ``ci`` (``[lo, hi]``), ``digits`` decimals each."""
    out = num(value, digits)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite(v) for v in ci):
        out += f" [{num(float(ci[0]), digits)}, {num(float(ci[1]), digits)}]"
    return out


def batch_key(b: str):
    """Sort key of a recorded batch size: numbers first, in order."""
    return (0, float(b)) if str(b).replace(".", "", 1).isdigit() else (1, str(b))


def short_name(name: str, width: int = 48) -> str:
    """Keep the end of a long tensor name (the informative part): ``…/layer.3/output/dense``."""
    if len(name) <= width:
        return name
    return "…" + name[-(width - 1):]


def md_cell(x: Value) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, newlines removed)."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(x: Value) -> str:
    """Inline code in a Markdown table cell (tensor names contain ``_`` and ``*``)."""
    text = str(x).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (quantkit.fsutil: temp file + rename)."""
    from quantkit.fsutil import atomic_write_bytes

    return atomic_write_bytes(path, data)
