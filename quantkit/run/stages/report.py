"""Stage "report": the record rendered as report.json / report.md / report.html in the run
directory (quantkit/report/; reports compute nothing)."""

from __future__ import annotations

from pathlib import Path

from quantkit.record.run_record import RunRecord
from quantkit.report.render import render_reports

__all__ = ["report"]


def report(record: RunRecord, run_dir: Path, formats) -> dict[str, Path]:
    """Render ``record`` into ``run_dir`` in ``formats``; format -> path written."""
    return render_reports(record, run_dir, formats=formats)
