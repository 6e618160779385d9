"""Rebuild the comparison report of a sweep: ``quantkit sweep <multirun dir>``.

Finds every ``record.json`` below the directory (one per Hydra multirun job), ranks the
candidates of all jobs (see quantkit.report.sweep_report) and writes sweep.md and sweep.html into
that directory. Prints the written paths. Exits 2 with a one-line error when the directory
is missing, holds no records, or a record cannot be read.
"""

from __future__ import annotations

import argparse
import logging
import sys

from quantkit.errors import QuantkitError
from quantkit.report.sweep_dir import rebuild

log = logging.getLogger(__name__)


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
