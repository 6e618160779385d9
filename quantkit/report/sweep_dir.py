"""A sweep directory's records ranked into its comparison report (sweep.md / sweep.html):
what ``quantkit sweep DIR`` and the end-of-multirun callback both call."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from quantkit.errors import QuantkitError, first_line
from quantkit.report.sweep_report import render_sweep

__all__ = ["SweepError", "find_records", "load_records", "rebuild"]

log = logging.getLogger(__name__)


class SweepError(QuantkitError):
    """A sweep directory is missing, empty or holds an unreadable record."""


def find_records(root: Path) -> list[Path]:
    """Every ``record.json`` strictly below ``root``, in sorted (deterministic) order."""
    return sorted(p for p in root.rglob("record.json") if p.is_file() and p.parent != root)


def load_records(paths: list[Path]) -> list[dict]:
    records = []
    for p in paths:
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SweepError("cannot read a run record", where=str(p), value=first_line(err),
                             fix="rerun that job or remove its directory") from None
        if not isinstance(rec, dict):
            raise SweepError("a run record must be a JSON object", where=str(p),
                             value=type(rec).__name__, fix="rerun that job or remove its directory")
        records.append(rec)
    return records


def rebuild(root: str | os.PathLike) -> dict[str, Path]:
    """Rank all records below ``root`` and write ``root``/sweep.md and sweep.html."""
    root = Path(root)
    if not root.is_dir():
        raise SweepError("the sweep directory does not exist", where=str(root),
                         fix="pass the multirun directory Hydra printed (e.g. multirun/<date>/<time>)")
    paths = find_records(root)
    if not paths:
        raise SweepError("no */record.json found below the sweep directory", where=str(root),
                         fix="pass a Hydra multirun directory whose jobs finished")
    records = load_records(paths)
    labels = [str(p.parent.relative_to(root)) for p in paths]
    links = [str((p.parent / "report.html").relative_to(root)) if (p.parent / "report.html").is_file()
             else None for p in paths]
    log.info("ranking %d record(s) below %s", len(records), root)
    return render_sweep(records, root, labels=labels, links=links)
