"""Formatting helpers shared by the reports: numbers, intervals, statuses, atomic writes.

Pure string formatting of values that are already in a RunRecord; nothing here measures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DASH = "—"
NOT_MEASURED = "not measured"

#: Verdict statuses best first; anything else ranks after them.
STATUS_ORDER = ("PASS", "INCONCLUSIVE", "FAIL")


def status_rank(status: Any) -> int:
    """0 for PASS, 1 for INCONCLUSIVE, 2 for FAIL, 3 for anything else (missing, SKIPPED)."""
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


def status_class(status: Any) -> str:
    """CSS class for a verdict status."""
    return {"PASS": "pass", "INCONCLUSIVE": "inconclusive", "FAIL": "fail"}.get(status, "other")


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite(x: Any) -> bool:
    return is_number(x) and math.isfinite(x)


def num(x: Any, digits: int = 4) -> str:
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


def signed(x: Any, digits: int = 4) -> str:
    """A number with an explicit sign (+0.0016, -0.0117)."""
    if not finite(x):
        return num(x, digits)
    return f"{x:+.{digits}f}"


def sig(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits (p-values, ratios, KL)."""
    if not finite(x):
        return num(x)
    return f"{x:.{digits}g}"


def pct(x: Any, digits: int = 2) -> str:
    """A fraction as a percentage (0.0123 -> 1.23%)."""
    if not finite(x):
        return num(x)
    return f"{100 * x:.{digits}f}%"


def interval(delta: Mapping[str, Any] | None, digits: int = 4, *, level: bool = True) -> str:
    """``+0.0016 [-0.0066, +0.0094] (95% CI)`` from ``{point, low, high, level}``.

    ``level=False`` leaves out the "(95% CI)" suffix (for table columns that say it once).
    """
    if not isinstance(delta, Mapping) or delta.get("point") is None:
        return NOT_MEASURED
    text = signed(delta.get("point"), digits)
    if delta.get("low") is not None or delta.get("high") is not None:
        text += f" [{signed(delta.get('low'), digits)}, {signed(delta.get('high'), digits)}]"
    lvl = delta.get("level")
    if level and finite(lvl):
        text += f" ({lvl * 100:g}% CI)"
    return text


def short_name(name: str, width: int = 48) -> str:
    """Keep the end of a long tensor name (the informative part): ``…/layer.3/output/dense``."""
    if len(name) <= width:
        return name
    return "…" + name[-(width - 1):]


def md_cell(x: Any) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, newlines removed)."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def md_code(x: Any) -> str:
    """Inline code in a Markdown table cell (tensor names contain ``_`` and ``*``)."""
    text = str(x).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}"


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (quantkit.fsutil: temp file + rename)."""
    from quantkit.fsutil import atomic_write_bytes

    return atomic_write_bytes(path, data)
