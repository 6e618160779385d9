"""Render a RunRecord into the sign-off report: report.json, report.md, report.html.

The report formats what the record holds and computes nothing: every number shown is a
value of the record (or a plot of record values). Missing sections say "not measured" or
are skipped. Output is deterministic: the same record gives byte-identical files (no
render time is written; the sign-off date is a field for the reviewer).

The report reads the typed RunRecord (quantkit/record/; a loaded record.json of any schema
version is read through quantkit.record.migrate first); each section of the report is built
by its own module (``*_section.py``) from it. What the record holds and the report does not
show is listed, with why, in :data:`quantkit.report.not_rendered.NOT_RENDERED`.

    from quantkit.report.render import render_reports
    paths = render_reports(record, run_dir)   # {"json": ..., "md": ..., "html": ...}
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

import jinja2

from quantkit.errors import ConfigError
from quantkit.record.migrate import as_record
from quantkit.record.run_record import RunRecord
from quantkit.report.calibration_section import calibration
from quantkit.report.detection_section import detection
from quantkit.report.family_section import family
from quantkit.report.fmt import (
    NOT_MEASURED,
    finite,
    md_cell,
    md_code,
    num,
    pct,
    short_name,
    sig,
    signed,
    status_class,
    text,
    write_atomic,
)
from quantkit.report.latency_section import latency_info, latency_rows
from quantkit.report.layers_section import TOP_N_LAYERS, layer_sections
from quantkit.report.metrics_section import metrics
from quantkit.report.plan_section import kernel_census, plan
from quantkit.report.plots import all_plots
from quantkit.report.provenance_section import provenance, stage_cache, stages
from quantkit.report.ptq_section import ptq_context
from quantkit.report.search_section import format_fill, search
from quantkit.report.svg import all_svg_plots
from quantkit.report.verdict_section import calibrator_rows, thresholds, verdict_block

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "TOP_N_LAYERS", "build_context", "render_html", "render_markdown",
           "render_reports"]

FORMATS = ("json", "md", "html")
FILENAMES = {"json": "report.json", "md": "report.md", "html": "report.html"}

TEMPLATES = Path(__file__).with_name("templates")


def render_reports(record: RunRecord | Mapping[str, object], out_dir: str | Path, *,
                   formats: Iterable[str] = FORMATS) -> dict[str, Path]:
    """Write the requested report files to ``out_dir`` atomically; return ``{format: path}``.

    ``record`` is a RunRecord or a loaded record.json (of any schema version). report.json
    is the record itself, as record.json writes it (a loaded older record as it was).
    """
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError("unknown report format", where="report.formats", value=unknown[0],
                          fix=f"use any of {list(FORMATS)}")
    if not isinstance(record, (Mapping, RunRecord)):
        raise ConfigError("a report renders a RunRecord", where="render_reports(record)",
                          value=type(record).__name__, fix="pass a RunRecord or a loaded record.json")
    out_dir = Path(out_dir)
    written = record.to_dict() if isinstance(record, RunRecord) else dict(record)
    ctx = build_context(record) if ("md" in formats or "html" in formats) else None
    # Render everything before writing anything: a rendering error leaves no partial report.
    rendered: dict[str, str] = {}
    for fmt in formats:
        if fmt == "json":
            rendered[fmt] = json.dumps(written, indent=2, ensure_ascii=False, default=str) + "\n"
        elif fmt == "md":
            rendered[fmt] = render_markdown(record, ctx=ctx)
        else:
            rendered[fmt] = render_html(record, ctx=ctx)
    paths: dict[str, Path] = {}
    for fmt, out in rendered.items():
        paths[fmt] = write_atomic(out_dir / FILENAMES[fmt], out.encode("utf-8"))
        log.info("wrote %s", paths[fmt])
    return paths


def render_markdown(record: RunRecord | Mapping[str, object], *,
                    ctx: dict[str, object] | None = None) -> str:
    """report.md as a string."""
    return _env(False).get_template("report.md.j2").render(
        **(ctx if ctx is not None else build_context(record)))


def render_html(record: RunRecord | Mapping[str, object], *,
                ctx: dict[str, object] | None = None) -> str:
    """report.html as a string: self-contained (inline CSS, plots as data URIs, no network)."""
    return _env(True).get_template("report.html.j2").render(
        **(ctx if ctx is not None else build_context(record)))


@lru_cache(maxsize=2)
def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=autoescape, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(md=md_cell, mdcode=md_code, num=num, signed=signed, sig=sig, pct=pct,
                       short=short_name, status_class=status_class)
    return env


def build_context(record: RunRecord | Mapping[str, object], *,
                  with_plots: bool = True) -> dict[str, object]:
    """Everything the templates show, as preformatted strings and rows (no measurement)."""
    record = as_record(record)
    verdicts = [c.verdict for c in record.candidates.values() if c.verdict is not None]
    ctx: dict[str, object] = {
        "experiment": text(record.experiment),
        "run_dir": text(record.run_dir),
        "command": record.command or "",
        "seed": text(record.seed),
        "started": text(record.started),
        "finished": text(record.finished),
        "NOT_MEASURED": NOT_MEASURED,
    }
    ctx.update(verdict_block(record))
    ctx["thresholds"] = thresholds(record, verdicts[0] if verdicts else None)
    level = next((d.level for v in verdicts for d in v.deltas.values() if finite(d.level)), None)
    ctx["ci_label"] = f"{level * 100:g}% CI" if level is not None else "interval"
    ctx.update(provenance(record))
    ctx["plan"] = plan(record)
    ctx["calibrator_rows"] = calibrator_rows(record)
    ctx["layer_sections"] = layer_sections(record)
    ctx["calibration"] = calibration(record)
    ctx["ptq"] = ptq_context(record)
    ctx["plots"] = _plots(record) if with_plots else []
    ctx["metrics"] = metrics(record)
    ctx["detection"] = detection(record)
    ctx["latency"] = latency_rows(record)
    ctx["latency_info"] = latency_info(record)
    ctx["search"] = search(record)
    ctx["format_fill"] = format_fill(record)
    ctx["family"] = family(record)
    ctx["stages"] = stages(record)
    ctx["stage_cache"] = stage_cache(record)
    ctx["kernel_census"] = kernel_census(record)
    ctx["notes"] = [str(n) for n in record.notes]
    ctx["signoff"] = {"reviewer": record.configured("report", "reviewer") or "",
                      "candidate": record.recommended or ""}
    ctx["sha256sums"] = [f"{sha}  {name}" for name, sha in record.artifacts.items()]
    return ctx


def _plots(record: RunRecord) -> list[dict[str, str]]:
    return [{"name": p.name, "title": p.title, "caption": p.caption, "svg": "",
             "src": "data:image/png;base64," + base64.b64encode(p.png).decode("ascii")}
            for p in all_plots(record)] + [
        {"name": p.name, "title": p.title, "caption": p.caption, "svg": p.svg,
         "src": "data:image/svg+xml;base64," + base64.b64encode(p.svg.encode()).decode("ascii")}
        for p in all_svg_plots(record)]
