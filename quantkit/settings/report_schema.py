"""report.* schema: the report formats and reviewer; the format check."""

from __future__ import annotations

from dataclasses import dataclass, field

from quantkit.settings.value_checks import _choice


@dataclass
class ReportConfig:
    formats: list[str] = field(default_factory=lambda: ["json", "md", "html"])
    reviewer: str = ""


def validate_report(r: ReportConfig) -> None:
    """Every report.formats entry is json, md or html."""
    for i, f in enumerate(r.formats):
        _choice(f"report.formats[{i}]", f, ("json", "md", "html"))
