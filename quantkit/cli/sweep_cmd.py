"""Rebuild the comparison report of a sweep: ``quantkit sweep <multirun dir>``.

Finds every ``record.json`` below the directory (one per Hydra multirun job), ranks the
candidates of all jobs (see quantkit.report.sweep_report) and writes sweep.md and sweep.html into
that directory. Prints the written paths. Exits 2 with a one-line error when the directory
is missing, holds no records, or a record cannot be read.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from quantkit.errors import QuantkitError

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
            raise SweepError("cannot read a run record", where=str(p), value=str(err).splitlines()[0],
                             fix="rerun that job or remove its directory") from None
        if not isinstance(rec, dict):
            raise SweepError("a run record must be a JSON object", where=str(p),
                             value=type(rec).__name__, fix="rerun that job or remove its directory")
        records.append(rec)
    return records


def rebuild(root: str | os.PathLike) -> dict[str, Path]:
    """Rank all records below ``root`` and write ``root``/sweep.md and sweep.html."""
    from quantkit.report.sweep_report import render_sweep

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="quantkit sweep",
        description="Rank the candidates of every run below a multirun directory and write "
                    "sweep.md / sweep.html there.")
    parser.add_argument("multirun_dir", help="directory holding the jobs' record.json files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        paths = rebuild(args.multirun_dir)
    except QuantkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    for p in paths.values():
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
