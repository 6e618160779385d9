"""Render a RunRecord into the sign-off report: report.json, report.md, report.html.

The report formats what the record holds and computes nothing: every number shown is a
value of the record (or a plot of record values). Missing sections say "not measured" or
are skipped. Output is deterministic: the same record gives byte-identical files (no
render time is written; the sign-off date is a field for the reviewer).

    from quantkit.report.render import render_reports
    paths = render_reports(record.to_dict(), run_dir)   # {"json": ..., "md": ..., "html": ...}
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path, PurePath
from typing import Any

from quantkit.errors import ConfigError
from quantkit.report.ptq_section import ptq_context
from quantkit.report.fmt import (
    DASH,
    NOT_MEASURED,
    finite,
    interval,
    is_number,
    md_cell,
    md_code,
    num,
    pct,
    short_name,
    sig,
    signed,
    status_class,
    write_atomic,
)

log = logging.getLogger(__name__)

__all__ = ["FORMATS", "TOP_N_LAYERS", "build_context", "render_html", "render_markdown",
           "render_reports"]

FORMATS = ("json", "md", "html")
FILENAMES = {"json": "report.json", "md": "report.md", "html": "report.html"}
#: Rows of the "worst layers" table shown before the collapsible full table.
TOP_N_LAYERS = 10

TEMPLATES = Path(__file__).with_name("templates")


# ----------------------------------------------------------------------------- public API

def render_reports(record: Mapping[str, Any], out_dir: str | Path, *,
                   formats: Iterable[str] = FORMATS) -> dict[str, Path]:
    """Write the requested report files to ``out_dir`` atomically; return ``{format: path}``.

    ``record`` is a RunRecord as a dict (``RunRecord.to_dict()`` or a loaded record.json).
    report.json is the record itself.
    """
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError("unknown report format", where="report.formats", value=unknown[0],
                          fix=f"use any of {list(FORMATS)}")
    if not isinstance(record, Mapping):
        raise ConfigError("a report renders a RunRecord dict", where="render_reports(record)",
                          value=type(record).__name__, fix="pass RunRecord.to_dict() or a loaded record.json")
    out_dir = Path(out_dir)
    ctx = build_context(record) if ("md" in formats or "html" in formats) else None
    # Render everything before writing anything: a rendering error leaves no partial report.
    rendered: dict[str, str] = {}
    for fmt in formats:
        if fmt == "json":
            rendered[fmt] = json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n"
        elif fmt == "md":
            rendered[fmt] = render_markdown(record, ctx=ctx)
        else:
            rendered[fmt] = render_html(record, ctx=ctx)
    paths: dict[str, Path] = {}
    for fmt, text in rendered.items():
        paths[fmt] = write_atomic(out_dir / FILENAMES[fmt], text.encode("utf-8"))
        log.info("wrote %s", paths[fmt])
    return paths


def render_markdown(record: Mapping[str, Any], *, ctx: dict[str, Any] | None = None) -> str:
    """report.md as a string."""
    return _env(False).get_template("report.md.j2").render(
        **(ctx if ctx is not None else build_context(record)))


def render_html(record: Mapping[str, Any], *, ctx: dict[str, Any] | None = None) -> str:
    """report.html as a string: self-contained (inline CSS, plots as data URIs, no network)."""
    return _env(True).get_template("report.html.j2").render(
        **(ctx if ctx is not None else build_context(record)))


@lru_cache(maxsize=2)
def _env(autoescape: bool):
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=autoescape, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(md=md_cell, mdcode=md_code, num=num, signed=signed, sig=sig, pct=pct,
                       short=short_name, status_class=status_class)
    return env


# ----------------------------------------------------------------------------- context

def _get(d: Any, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return default
        d = d[k]
    return default if d is None else d


def _text(x: Any) -> str:
    if x is None or x == "":
        return DASH
    if isinstance(x, (list, tuple)):
        return ", ".join(str(v) for v in x) if x else DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    return str(x)


def build_context(record: Mapping[str, Any], *, with_plots: bool = True) -> dict[str, Any]:
    """Everything the templates show, as preformatted strings and rows (no measurement)."""
    cands = {n: c for n, c in (_get(record, "candidates", default={}) or {}).items()
             if isinstance(c, Mapping)}
    first_verdict = next((c["verdict"] for c in cands.values()
                          if isinstance(c.get("verdict"), Mapping)), None)
    ctx: dict[str, Any] = {
        "experiment": _text(record.get("experiment")),
        "run_dir": _text(record.get("run_dir")),
        "command": record.get("command") or "",
        "seed": _text(record.get("seed")),
        "started": _text(record.get("started")),
        "finished": _text(record.get("finished")),
        "NOT_MEASURED": NOT_MEASURED,
    }
    ctx.update(_verdict_block(record, cands))
    ctx["thresholds"] = _thresholds(record, first_verdict)
    level = next((d.get("level") for c in cands.values()
                  for d in (_get(c, "verdict", "deltas", default={}) or {}).values()
                  if isinstance(d, Mapping) and finite(d.get("level"))), None)
    ctx["ci_label"] = f"{level * 100:g}% CI" if level is not None else "interval"
    ctx.update(_provenance(record, cands))
    ctx["plan"] = _plan(cands)
    ctx["calibrator_rows"] = _calibrator_rows(record, cands)
    ctx["layer_sections"] = _layer_sections(record, cands)
    ctx["calibration"] = _calibration(record)
    ctx["ptq"] = ptq_context(record)
    ctx["plots"] = _plots(record) if with_plots else []
    ctx["metrics"] = _metrics(record, cands)
    ctx["latency"] = _latency(cands)
    ctx["latency_info"] = _latency_info(record)
    ctx["search"] = _search(record)
    ctx["family"] = _family(record)
    ctx["stages"] = _stages(record)
    ctx["kernel_census"] = _kernel_census(cands)
    ctx["notes"] = [str(n) for n in record.get("notes") or []]
    ctx["signoff"] = {
        "reviewer": _get(record, "config", "report", "reviewer", default="") or "",
        "candidate": record.get("recommended") or "",
    }
    ctx["sha256sums"] = [f"{sha}  {name}" for name, sha in
                         (_get(record, "artifacts", default={}) or {}).items()]
    return ctx


def _metric_of(verdict: Mapping[str, Any]) -> str | None:
    return verdict.get("metric") or _get(verdict, "margin", "metric")


def _verdict_block(record, cands) -> dict[str, Any]:
    from quantkit.report.status import engine_lines, verdict_view

    rec = record.get("recommended")
    rows = []
    for name, c in cands.items():
        v = c.get("verdict")
        warnings = []
        bc = c.get("backend_check")
        if isinstance(bc, Mapping) and bc.get("gates_recommendation") and bc.get("ok") is False:
            warnings.append(f"engine check {bc.get('status')}: {bc.get('what_to_run') or ''}")
        elif isinstance(bc, Mapping) and "gates_recommendation" not in bc and \
                bc.get("checked") and bc.get("ok") is False:  # a record from before issue 24
            warnings.append(f"backend check failed: agreement {num(bc.get('agreement'))} "
                            f"on n={num(bc.get('n'))}")
        lint = _get(c, "lint", "violations")
        if is_number(lint) and lint > 0:
            warnings.append(f"{lint} lint violation(s)")
        if not isinstance(v, Mapping):
            rows.append({"name": name, "status": "REFERENCE" if name == "fp32" else "NO VERDICT",
                         "cls": "other", "headline": c.get("numerics") or "",
                         "reasons": [], "recommended": name == rec, "warnings": warnings,
                         "required_n": None})
            continue
        reasons = [str(r) for r in v.get("reasons") or []]
        metric = _metric_of(v)
        d = _get(v, "deltas", metric) if metric else None
        what = (f"{metric} delta" if metric in ("accuracy", "macro_f1") else
                f"{metric}: share of examples within the tolerance"
                if "quantile" in (v.get("margin") or {}) else str(metric))
        headline = f"{what} {interval(d)}" if isinstance(d, Mapping) else \
            (reasons[0] if reasons else "")
        view = verdict_view(record, name, v.get("status"))
        rows.append({"name": name, "status": view.text, "cls": view.cls, "headline": headline,
                     "reasons": reasons, "recommended": name == rec, "warnings": warnings,
                     "required_n": v.get("required_n"), "dev_only": view.dev_only})
    rec_row = next((r for r in rows if r["recommended"]), None)
    return {"recommended": rec, "recommended_row": rec_row, "verdicts": rows,
            "engine": engine_lines(record, rec),
            "recommendation_reason": _text(_get(record, "recommendation", "reason"))}


def _cfg(x: Any) -> str:
    """A configured value as written (0.01, 10, 2000), not padded to fixed decimals."""
    return f"{x:g}" if finite(x) and not isinstance(x, bool) else _text(x)


def _label_free_thresholds(metric, mg: Mapping[str, Any], level) -> list[tuple[str, str]]:
    """Threshold rows of a label-free verdict (agreement, or a per-example score vs FP32)."""
    lvl = f"the {pct(level, 0)} interval" if finite(level) else "the interval"
    if "quantile" in mg:
        side = ">=" if mg.get("higher_is_better", True) else "<="
        rows = [("decision metric", f"{_text(metric)} (label-free, vs FP32)"),
                ("per-example tolerance", f"{_text(metric)} {side} {_cfg(mg.get('bound'))}"),
                ("tested", f"the share of examples within it (the {_cfg(mg['quantile'])} "
                           "quantile, verdict.score_quantile), exact binomial "
                           "(Clopper-Pearson) bound"),
                ("PASS when", f"{lvl} of the share of examples within the tolerance lies "
                              f"above {_cfg(mg.get('min_share'))}")]
        gal = mg.get("gallery")
        if isinstance(gal, Mapping):
            rows.append(("recall@k gallery", f"{num(gal.get('size'))} {_text(gal.get('source'))} "
                                             f"examples, sha256 {str(gal.get('sha256'))[:12]}"))
        return rows
    for bound, where in (("floor", "above"), ("ceiling", "below"),
                         ("min_agreement", "above")):
        if bound in mg:
            return [("decision metric", f"{_text(metric)} (label-free, vs FP32)"),
                    (f"declared {'minimum' if bound == 'min_agreement' else bound}",
                     _cfg(mg[bound])),
                    ("PASS when", f"{lvl} of the mean lies {where} it")]
    return []


def _thresholds(record, v) -> list[tuple[str, str]]:
    cfg_v = _get(record, "config", "verdict", default={}) or {}
    cfg_c = _get(record, "config", "compare", default={}) or {}
    rows: list[tuple[str, str]] = []
    if isinstance(v, Mapping):
        margin = v.get("margin") or {}
        metric = _metric_of(v)
        level = next((d.get("level") for d in (v.get("deltas") or {}).values()
                      if isinstance(d, Mapping) and d.get("level") is not None), None)
        label_free = _label_free_thresholds(metric, margin, level)
        rows += label_free + [("alpha", _cfg(v.get("alpha"))),
                              ("paired eval examples (n)", num(v.get("n")))] if label_free else [
            ("decision metric", _text(metric)),
            ("margin kind", _text(margin.get("kind"))),
            ("margin value", _cfg(margin.get("value"))),
            ("margin (absolute)", sig(margin.get("abs"), 4)),
            ("PASS when", f"the {f'{100 * level:g}%' if finite(level) else ''} interval of the "
                          f"{_text(metric)} delta lies above -{sig(margin.get('abs'), 4)}"),
            ("alpha", _cfg(v.get("alpha"))),
            ("paired eval examples (n)", num(v.get("n"))),
        ]
    else:
        rows.append(("verdict", NOT_MEASURED))
    rows += _budget_rows(record)
    if "n_boot" in cfg_v:
        rows.append(("bootstrap resamples", _cfg(cfg_v["n_boot"])))
    for key, label in (("floor_multiple", "layer flagged when INT8 noise > this x FP16 noise"),
                       ("numerics_margin_share", "engine check: its share of the margin"),
                       ("backend_check_subset", "engine check: dev examples (at most)"),
                       ("subset", "per-layer comparison: examples")):
        if key in cfg_c:
            rows.append((label, _cfg(cfg_c[key])))
    return rows


def _budget_rows(record) -> list[tuple[str, str]]:
    """The declared budget's split between the sign-off and the engine check (the record's
    ``backend_check.budget``), so the margin above reads against what was declared."""
    b = next((_get(c, "backend_check", "budget") for c in
              (_get(record, "candidates", default={}) or {}).values()
              if isinstance(_get(c, "backend_check", "budget"), Mapping)), None)
    if not b or not b.get("share"):
        return []
    kind = _get(record, "config", "verdict", "margin_kind", default="")
    if b.get("metric") in ("accuracy", "macro_f1") and kind == "relative":
        rel = " (relative: x FP32 accuracy)"
        return [("declared margin (bounds the deployed artifact)", _cfg(b.get("declared")) + rel),
                ("the sign-off decides at", _cfg(b.get("signoff")) + rel),
                ("engine check tolerance", f"{_cfg(b.get('tolerance'))}{rel} as a "
                                           f"{_text(b.get('units'))} vs the emulation; "
                                           f"{_text(b.get('composition'))}")]
    return [("declared budget (bounds the deployed artifact)", _cfg(b.get("declared"))),
            ("the sign-off decides at", _cfg(b.get("signoff"))),
            ("engine check tolerance", f"{_cfg(b.get('tolerance'))} ({_text(b.get('units'))} "
                                       f"vs the emulation; {_text(b.get('composition'))})")]


def _sha_for(record, path: Any) -> str:
    """The sha256 the record lists for ``path`` (by run-relative path or file name)."""
    arts = _get(record, "artifacts", default={}) or {}
    if not path:
        return "not recorded"
    p = PurePath(str(path))
    candidates = [str(path), p.name]
    run_dir = record.get("run_dir")
    if run_dir:
        try:
            candidates.append(str(p.relative_to(run_dir)))
        except ValueError:
            pass
    for key in candidates:
        if key in arts:
            return arts[key]
    return "not recorded"


def _provenance(record, cands) -> dict[str, Any]:
    model = _get(record, "model", default={}) or {}
    model_rows = [(k, _text(model.get(k))) for k in
                  ("source", "path", "sha256", "opset", "input_names", "output_name", "tokenizer")
                  if k in model]
    data = _get(record, "data", default={}) or {}
    sizes, shas = data.get("sizes") or {}, data.get("sha256") or {}
    splits = list(dict.fromkeys([*sizes, *shas]))
    data_rows = [{"split": s, "size": num(sizes.get(s)), "sha256": shas.get(s) or "not recorded"}
                 for s in splits]
    artifact_rows = []
    for name, c in cands.items():
        art = c.get("artifact")
        sha = c.get("artifact_sha256")
        if not sha and art:
            sha = _sha_for(record, art)
            if sha == "not recorded" and model.get("path") and PurePath(str(art)).name == \
                    PurePath(str(model["path"])).name:
                sha = model.get("sha256") or sha
        artifact_rows.append({"candidate": name, "file": _text(art), "sha256": sha or "not recorded",
                              "numerics": c.get("numerics") or DASH})
    files = _get(record, "calibration", "files", default={}) or {}
    ranges_rows = [{"method": m, "path": str(p), "sha256": _sha_for(record, p)}
                   for m, p in files.items()]
    packages = [(k, v if v else "not installed")
                for k, v in (_get(record, "packages", default={}) or {}).items()]
    host = _get(record, "host", default={}) or {}
    host_rows = [(k, _text(v) if v is not None else "none detected" if k == "gpu" else DASH)
                 for k, v in host.items()]
    return {"model_rows": model_rows, "data_name": _text(data.get("name")),
            "data_source": _text(data.get("source")), "data_rows": data_rows,
            "artifact_rows": artifact_rows, "ranges_rows": ranges_rows,
            "packages": packages, "host_rows": host_rows}


def _plan(cands) -> dict[str, Any]:
    rows, decisions = [], []
    precisions: list[str] = []
    for c in cands.values():
        for p in (c.get("plan_counts") or {}):
            if p not in precisions:
                precisions.append(p)
    for name, c in cands.items():
        counts = c.get("plan_counts")
        if not isinstance(counts, Mapping):
            continue
        rows.append({"name": name, "counts": [num(counts.get(p)) for p in precisions],
                     "lint": num(_get(c, "lint", "violations")),
                     "calibrator": _text(c.get("calibrator")) if c.get("calibrator") else ""})
        nodes = []
        plan = c.get("plan")
        if isinstance(_get(plan, "decisions"), Mapping):  # full plan: node -> {precision, reason}
            nodes = [{"node": n, "precision": _text(_get(d, "precision")), "reason": _text(_get(d, "reason"))}
                     for n, d in plan["decisions"].items()]
        elif isinstance(c.get("plan_reasons"), Mapping):  # nodes moved off the default, with why
            fp16 = set(c.get("fp16_layers") or [])
            nodes = [{"node": n, "precision": "fp16" if n in fp16 else DASH, "reason": _text(r)}
                     for n, r in c["plan_reasons"].items()]
        if nodes or "plan_reasons" in c:
            decisions.append({"name": name, "rows": nodes, "full": bool(plan)})
    return {"precisions": precisions, "rows": rows, "decisions": decisions}


def _backend_text(bc: Any, *, detail: bool = True) -> str:
    if isinstance(bc, Mapping) and "gates_recommendation" in bc:  # the engine check
        status = str(bc.get("status"))
        if not bc.get("checked"):
            return {"not_run": "NOT run", "not_needed": "not needed"}.get(status, status) + \
                (f": {bc.get('what_to_run') or bc.get('reason')}" if detail else "")
        gate = bc.get("gate") or {}
        text = f"{status} ({gate.get('units', '')} {sig(gate.get('observed'), 3)} <= " \
               f"{sig(gate.get('tolerance'), 3)}?)"
        return text + (f", n={num(bc.get('n'))}" + (f"; {bc['what_to_run']}"
                                                    if bc.get("what_to_run") else "")
                       if detail else "")
    if not isinstance(bc, Mapping) or not bc.get("checked"):
        return "not checked"
    if not detail:
        return ("ok" if bc.get("ok") else "MISMATCH") + f" ({num(bc.get('agreement'))})"
    text = ("ok" if bc.get("ok") else "MISMATCH") + \
        f": agreement {num(bc.get('agreement'))}, n={num(bc.get('n'))}"
    acc = bc.get("accuracy")
    if isinstance(acc, Mapping) and acc:
        text += " (accuracy " + ", ".join(f"{k} {num(v)}" for k, v in acc.items()) + ")"
    return text


def _calibrator_rows(record, cands) -> list[dict[str, Any]]:
    from quantkit.report.status import verdict_view

    rows = []
    for name, c in cands.items():
        v = c.get("verdict") if isinstance(c.get("verdict"), Mapping) else {}
        metric = _metric_of(v) if v else None
        mc = v.get("mcnemar") or {}
        status = v.get("status")
        view = verdict_view(record, name, status)
        rows.append({
            "name": name,
            "recommended": name == record.get("recommended"),
            "accuracy": num(_get(c, "metrics", "accuracy")),
            "macro_f1": num(_get(c, "metrics", "macro_f1")),
            "agreement": num(c.get("agreement_fp32")),
            "kl": sig(c.get("mean_kl_fp32")) if c.get("mean_kl_fp32") is not None else DASH,
            "metric": metric or DASH,
            "delta": interval(_get(v, "deltas", metric), level=False) if metric else
            ("reference" if name == "fp32" else NOT_MEASURED),
            "b": num(mc.get("b")), "c": num(mc.get("c")),
            "p": sig(mc.get("p")) if mc.get("p") is not None else DASH,
            "status": view.text if status else ("reference" if name == "fp32" else DASH),
            "cls": view.cls,
            "required_n": num(v.get("required_n")) if status == "INCONCLUSIVE" else DASH,
            "backend": _backend_text(c.get("backend_check")) if name != "fp32" else DASH,
            "backend_short": _backend_text(c.get("backend_check"), detail=False)
            if name != "fp32" else DASH,
        })
    return rows


def _slice_status(record, name: str, status: Any) -> dict[str, str]:
    """A slice verdict's badge: a dev-only candidate's slices are not signed off either."""
    from quantkit.report.status import verdict_view

    view = verdict_view(record, name, status)
    return {"status": view.text if status else _text(status), "cls": view.cls}


def _layer_row(record, cand_name, idx, tensor, stats, flagged) -> dict[str, Any]:
    from quantkit.report.plots import floor_sqnr

    f = flagged.get(tensor) or {}
    clip = stats.get("clipping_rate")
    return {"idx": idx, "name": tensor,
            "sqnr": num(stats.get("sqnr_db"), 2),
            "floor": num(floor_sqnr(record, cand_name, tensor), 2),
            "cosine": num(stats.get("cosine"), 6),
            "clip": pct(clip, 4) if clip is not None else "not quantized",
            "rel": sig(stats.get("relative_error")),
            "ratio": sig(f.get("ratio")) if f.get("ratio") is not None else DASH,
            "flagged": bool(f)}


def _layer_sections(record, cands) -> list[dict[str, Any]]:
    from quantkit.report.plots import floor_candidate, layer_candidates

    sections = []
    for name in layer_candidates(record):
        c = cands[name]
        layers = {t: s for t, s in c["layers"].items() if isinstance(s, Mapping)}
        flagged = {f["name"]: f for f in c.get("flagged_layers") or []
                   if isinstance(f, Mapping) and f.get("name") and f.get("flagged", True)}
        rows = [_layer_row(record, name, i, t, s, flagged) for i, (t, s) in enumerate(layers.items())]
        sqnr = [s.get("sqnr_db") for s in layers.values()]
        # worst first; tensors without an SQNR last; ties in graph order
        by_sqnr = sorted(range(len(rows)),
                         key=lambda i: (0, sqnr[i], i) if finite(sqnr[i]) else (1, 0.0, i))
        first = c.get("first_diverging")
        sections.append({
            "name": name,
            "n": len(rows),
            "n_flagged": len(flagged),
            "first_diverging": first,
            "first_index": list(layers).index(first) if first in layers else None,
            "worst": [rows[i] for i in by_sqnr[:TOP_N_LAYERS]],
            "all": rows,
            "has_floor": floor_candidate(record) is not None or bool(flagged),
        })
    return sections


def _calibration(record) -> dict[str, Any] | None:
    cal = _get(record, "calibration", default={}) or {}
    if not cal:
        return None
    rows = [(label, _text(cal.get(k))) for k, label in
            (("methods", "calibrators"), ("tensors", "calibrated tensors"),
             ("quant_nodes", "quantized nodes"), ("samples", "calibration samples"))
            if k in cal]
    excluded = [(str(k), _text(v)) for k, v in (cal.get("excluded") or {}).items()]
    notes = [(str(k), _text(v)) for k, v in (cal.get("notes") or {}).items()] \
        if isinstance(cal.get("notes"), Mapping) else [("", _text(n)) for n in cal.get("notes") or []]
    spread = cal.get("spread") or {}
    spread_rows = [(str(k), json.dumps(v, sort_keys=True) if not isinstance(v, str) else v)
                   for k, v in spread.items()] if isinstance(spread, Mapping) else []
    return {"rows": rows, "excluded": excluded, "notes": notes, "spread": spread_rows}


def _plots(record) -> list[dict[str, str]]:
    from quantkit.report.plots import all_plots
    from quantkit.report.svg import all_svg_plots

    return [{"name": p.name, "title": p.title, "caption": p.caption, "svg": "",
             "src": "data:image/png;base64," + base64.b64encode(p.png).decode("ascii")}
            for p in all_plots(record)] + [
        {"name": p.name, "title": p.title, "caption": p.caption, "svg": p.svg,
         "src": "data:image/svg+xml;base64," + base64.b64encode(p.svg.encode()).decode("ascii")}
        for p in all_svg_plots(record)]


def _label_of(record, slice_name: str, value: str) -> str:
    names = _get(record, "data", "label_names", default=None) or \
        _get(record, "model", "label_names", default=None)
    if slice_name == "class" and names and str(value).isdigit() and int(value) < len(names):
        return f"{value} ({names[int(value)]})"
    return str(value)


def _metrics(record, cands) -> dict[str, Any]:
    metric_names: list[str] = []
    for c in cands.values():
        for k, v in (c.get("metrics") or {}).items():
            if k != "n" and is_number(v) and k not in metric_names:
                metric_names.append(k)
    rows = []
    for name, c in cands.items():
        m = c.get("metrics") or {}
        v = c.get("verdict") if isinstance(c.get("verdict"), Mapping) else {}
        rows.append({"name": name, "n": num(m.get("n", c.get("n"))),
                     "values": [num(m.get(k)) for k in metric_names],
                     "deltas": [interval(_get(v, "deltas", k), level=False) if _get(v, "deltas", k) else
                                ("reference" if name == "fp32" else NOT_MEASURED)
                                for k in metric_names]})
    per_class = []
    for name, c in cands.items():
        pc = _get(c, "metrics", "per_class", default={}) or {}
        if isinstance(pc, Mapping) and pc:
            per_class.append({"name": name, "rows": [
                {"label": lbl, "precision": num(s.get("precision")), "recall": num(s.get("recall")),
                 "f1": num(s.get("f1")), "support": num(s.get("support"))}
                for lbl, s in pc.items() if isinstance(s, Mapping)]})
    # slice x candidate matrix of the recorded slice metric
    slice_cols = [n for n, c in cands.items() if isinstance(c.get("slices"), Mapping) and c["slices"]]
    slice_keys: list[tuple[str, str]] = []
    slice_metric = None
    for n in slice_cols:
        for s, values in cands[n]["slices"].items():
            for val, stats in (values or {}).items():
                if (s, val) not in slice_keys:
                    slice_keys.append((s, val))
                if slice_metric is None and isinstance(stats, Mapping):
                    slice_metric = next((k for k in stats if k != "n"), None)
    slice_rows = []
    for s, val in slice_keys:
        cells, n_val = [], None
        for n in slice_cols:
            st = _get(cands[n], "slices", s, val, default={})
            cells.append(num(st.get(slice_metric)) if slice_metric else DASH)
            n_val = n_val if n_val is not None else st.get("n")
        slice_rows.append({"slice": s, "value": _label_of(record, s, val), "n": num(n_val),
                           "cells": cells})
    slice_verdicts = []
    for name, c in cands.items():
        sl = _get(c, "verdict", "slices", default=[]) or []
        if not sl:
            continue
        rows_v = []
        for s in sl:
            if not isinstance(s, Mapping):
                continue
            rows_v.append({"slice": f"{s.get('slice', DASH)}={s.get('value', DASH)}",
                           "n": num(s.get("n")), "ref": num(s.get("ref")), "cand": num(s.get("cand")),
                           "delta": interval(s.get("delta"), level=False) if s.get("delta") else DASH,
                           "margin": signed(-s["margin_abs"]) if finite(s.get("margin_abs")) else DASH,
                           "p": sig(s.get("p_noninferiority_holm"))
                           if s.get("p_noninferiority_holm") is not None else DASH,
                           "p_reg": sig(s.get("p_regression_holm"))
                           if s.get("p_regression_holm") is not None else DASH,
                           **_slice_status(record, name, s.get("status")),
                           "reason": _text(s.get("reason")) if s.get("reason") else ""})
        slice_verdicts.append({"name": name, "rows": rows_v})
    return {"names": metric_names, "rows": rows, "per_class": per_class,
            "slice_cols": slice_cols, "slice_metric": slice_metric or DASH,
            "slice_rows": slice_rows, "slice_verdicts": slice_verdicts}


def _batch_key(b: str):
    return (0, float(b)) if str(b).replace(".", "", 1).isdigit() else (1, str(b))


def _with_ci(value: Any, ci: Any, digits: int) -> str:
    """``1.234 [1.100, 1.400]``: ``value`` and, when both ends are finite, its interval ``ci``
    (``[lo, hi]``), ``digits`` decimals each."""
    text = num(value, digits)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite(v) for v in ci):
        text += f" [{num(float(ci[0]), digits)}, {num(float(ci[1]), digits)}]"
    return text


def _vs_fp16(s: Mapping[str, Any]) -> str:
    c = s.get("vs_fp16")
    if not isinstance(c, Mapping):
        return ""
    ratio = _with_ci(c.get("median_ratio_vs_fp16"), c.get("median_ratio_vs_fp16_ci"), 2)
    flag = "INT8 NOT FASTER than FP16" if c.get("int8_not_faster") else "faster than FP16"
    return f"{flag} (median ratio {ratio}, {_text(c.get('status'))})"


def _latency(cands) -> list[dict[str, str]]:
    """Latency rows: per candidate and batch size, percentiles and throughput with intervals."""
    rows = []
    for name, c in cands.items():
        lat = c.get("latency")
        if not isinstance(lat, Mapping):
            continue
        for batch in sorted(lat, key=_batch_key):
            s = lat[batch]
            if not isinstance(s, Mapping):
                continue
            vs = _vs_fp16(s)
            ms = {p: _with_ci(s.get(f"{p}_ms"), s.get(f"{p}_ms_ci"), 3)
                  for p in ("p50", "p90", "p99")}
            rows.append({"name": name, "batch": str(batch), **ms,
                         "throughput": _with_ci(s.get("throughput"), s.get("throughput_ci"), 1),
                         "n": num(s.get("n")), "vs_fp16": vs,
                         "flagged": bool(isinstance(s.get("vs_fp16"), Mapping)
                                         and s["vs_fp16"].get("int8_not_faster"))})
    return rows


def _feed_shapes(batch: Any, shapes: Any) -> str:
    """``batch 32: input_ids [32, 18] / [32, 25] (+ attention_mask)``: the timed feeds' shapes."""
    feeds = [f for f in (shapes if isinstance(shapes, list) else [shapes]) if isinstance(f, Mapping) and f]
    if not feeds:
        return f"batch {batch}: {DASH}"
    first, *rest = list(feeds[0])
    text = f"batch {batch}: {first} " + " / ".join(str(f.get(first)) for f in feeds)
    return text + (f" (+ {', '.join(rest)})" if rest else "")


def _latency_info(record) -> dict[str, Any] | None:
    """What the latency numbers belong to (backend, provider, device, host) and the cost table."""
    lat = record.get("latency")
    if not isinstance(lat, Mapping) or not lat:
        return None
    host = lat.get("host") if isinstance(lat.get("host"), Mapping) else {}
    st = lat.get("settings") if isinstance(lat.get("settings"), Mapping) else {}
    level = st.get("level")
    reused = sorted({f"{n} (measured {s.get('measured_at')})"
                     for n, c in (record.get("candidates") or {}).items()
                     if isinstance(c, Mapping) and isinstance(c.get("latency"), Mapping)
                     for s in c["latency"].values() if isinstance(s, Mapping) and s.get("reused")})
    info: dict[str, Any] = {
        "reused": reused,
        "execution": _text(lat.get("execution")), "device": _text(lat.get("device")),
        "backend": _text(lat.get("backend")), "providers": _text(lat.get("providers")),
        "target": _text(lat.get("target")), "caveat": _text(lat.get("caveat")),
        "host": f"{_text(host.get('cpu'))}, {_text(host.get('cpu_count'))} cores, "
                f"intra-op threads {_text(host.get('intra_op_threads'))} (0 = ORT default)",
        "method": (f"{_text(st.get('warmup'))} warm-up runs, then timed runs until "
                   f"{_text(st.get('repeats'))} runs or {_text(st.get('max_seconds'))} s (at least "
                   f"{_text(st.get('min_repeats'))}), cycling {_text(st.get('feeds'))} eval batches, "
                   "the same for every candidate; latency per batch; intervals: "
                   f"{num(level * 100, 0) + '% ' if finite(level) else ''}percentile bootstrap "
                   f"({_text(st.get('n_boot'))} resamples, seeded)"),
        "inputs": [_feed_shapes(b, shapes) for b, shapes in
                   sorted((lat.get("inputs") or {}).items(), key=lambda t: _batch_key(t[0]))],
        "skipped": [f"{k}: {v}" for k, v in (lat.get("skipped") or {}).items()]
        + [f"batch {k}: {v}" for k, v in (lat.get("skipped_batches") or {}).items()],
        "flags": [f"{f.get('candidate')} at batch {f.get('batch_size')}: INT8 / FP16 latency "
                  f"ratio {num(f.get('median_ratio_vs_fp16'), 2)} (median run by run; "
                  f"{_text(f.get('status'))})"
                  for f in lat.get("int8_not_faster") or [] if isinstance(f, Mapping)],
    }
    cost = lat.get("cost") if isinstance(lat.get("cost"), Mapping) else {}
    rows = []
    for name, c in (cost.get("per_candidate") or {}).items():
        if not isinstance(c, Mapping):
            continue
        rng = c.get("instances_range")
        saving = c.get("saving_vs_fp32")
        rows.append({
            "name": name,
            "batch": _text(c.get("batch_size")),
            "p99": num(c.get("p99_ms"), 3) if c.get("fits_budget") else DASH,
            "qps": num(c.get("qps_per_instance"), 1),
            "instances": (f"{c['instances']}" + (f" [{rng[0]}, {rng[1]}]"
                                                 if isinstance(rng, (list, tuple)) and len(rng) == 2
                                                 and rng[0] != rng[1] else ""))
            if c.get("instances") else DASH,
            "saving": (f"{pct(saving, 1)} ({c.get('instances_saved_vs_fp32'):+d} instances)"
                       if finite(saving) and isinstance(c.get("instances_saved_vs_fp32"), int)
                       else "FP32 cannot meet the budget" if c.get("fits_budget") else DASH),
            "note": _text(c.get("reason")) if not c.get("fits_budget") else ""})
    fp32 = (cost.get("per_candidate") or {}).get("fp32")
    info["cost_fp32_note"] = (
        "FP32 fits no measured batch size within the P99 budget, so no saving against it can be "
        "computed; raise bench.p99_budget_ms or measure smaller batch sizes to compare"
        if isinstance(fp32, Mapping) and not fp32.get("fits_budget") else "")
    info["cost"] = {"target_qps": num(cost.get("target_qps"), 1),
                    "p99_budget_ms": num(cost.get("p99_budget_ms"), 1),
                    "method": _text(cost.get("method")), "rows": rows} if cost else None
    return info


#: Search summary fields shown first, in this order, with their labels.
_SEARCH_FIELDS = (("calibrator", "searched from"), ("status", "status of the set found"),
                  ("reason", "why it stopped"), ("k", "smallest passing prefix (k)"),
                  ("metric", "metric of the set found"), ("interval", "its interval"),
                  ("full_evals", "full evaluations"), ("bound", "evaluation bound"),
                  ("full_evals_linear", "evaluations a linear scan would need"),
                  ("num_layers", "INT8 layers searched"),
                  ("quantizable_layers", "quantizable layers"),
                  ("budget_exhausted", "budget exhausted"), ("seconds", "seconds"))
_SEARCH_LISTS = ("evaluations", "pareto", "found", "fp16_nodes", "pruned", "ranking", "proxy")


def _value_text(v: Any) -> str:
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(is_number(x) for x in v):
        return f"[{num(v[0])}, {num(v[1])}]"
    if isinstance(v, (list, tuple, Mapping)):
        return f"{len(v)} entries (see report.json)"
    return _text(v)


def _search(record) -> dict[str, Any] | None:
    s = record.get("search")
    if not isinstance(s, Mapping) or not s:
        return None
    if s.get("skipped"):
        return {"skipped": _text(s["skipped"])}
    from quantkit.report.plots import search_interval, search_k, search_margin, search_metric

    metric_name, _ = search_margin([e for e in s.get("evaluations") or [] if isinstance(e, Mapping)])
    metric_label = f"{metric_name} delta vs FP32" if metric_name else "metric"
    summary = [(label.replace("metric", metric_label), _value_text(s[k]))
               for k, label in _SEARCH_FIELDS if k in s]
    known = {k for k, _ in _SEARCH_FIELDS} | set(_SEARCH_LISTS)
    summary += [(k, _value_text(v)) for k, v in s.items() if k not in known]
    status = s.get("status")
    from quantkit.report.status import DEV_CLASS, signed_candidates

    on_dev = signed_candidates(record) is not None  # the search chooses on dev only

    def badge(st: Any) -> dict[str, str]:
        if on_dev and st:
            return {"status": f"{_text(st)} on dev", "cls": DEV_CLASS}
        return {"status": _text(st), "cls": status_class(st)}

    def fp16_text(x: Any) -> str:
        return ", ".join(str(n) for n in x) if isinstance(x, (list, tuple)) else _text(x)

    evals = []
    for i, e in enumerate(s.get("evaluations") or []):
        if not isinstance(e, Mapping):
            continue
        iv = search_interval(e.get("interval"))
        evals.append({"i": e.get("index", i), "phase": _text(e.get("phase")),
                      "k": num(e.get("k")), "count": num(search_k(e)),
                      **badge(e.get("status")),
                      "metric": signed(search_metric(e)) if finite(search_metric(e)) else DASH,
                      "interval": f"[{signed(iv[0])}, {signed(iv[1])}]" if iv else DASH,
                      "seconds": num(e.get("seconds"), 1),
                      "fp16_set": fp16_text(e.get("fp16_set") or [])})
    pareto = []
    for p in s.get("pareto") or []:
        if isinstance(p, Mapping):
            pareto.append({"count": num(search_k(p)), "metric": signed(search_metric(p))
                           if finite(search_metric(p)) else DASH,
                           **badge(p.get("status")),
                           "index": num(p.get("index")), "fp16_set": fp16_text(p.get("fp16_set") or [])})
        else:
            pareto.append({"count": DASH, "metric": DASH, "status": DASH, "cls": "other",
                           "index": _text(p), "fp16_set": ""})
    found = s.get("fp16_nodes", s.get("found"))
    found_list = [str(n) for n in found] if isinstance(found, (list, tuple)) else []
    proxy = s.get("proxy") if isinstance(s.get("proxy"), Mapping) else {}
    proxy_cols: list[str] = []
    for v in proxy.values():
        for k, x in (v or {}).items():
            if is_number(x) and k not in proxy_cols:
                proxy_cols.append(k)
    ranking = []
    for r, node in enumerate(s.get("ranking") or [], 1):
        pv = proxy.get(node) or {}
        ranking.append({"rank": r, "node": str(node),
                        "cells": [sig(pv.get(k), 4) if is_number(pv.get(k)) else DASH
                                  for k in proxy_cols],
                        "found": str(node) in found_list})
    mixed_signed = "mixed" in (signed_candidates(record) or ())
    head = badge(status)
    if on_dev and status and not mixed_signed:
        head["status"] += "; not signed off"
    return {"summary": summary, **head,
            "found": found_list, "pruned": [str(n) for n in s.get("pruned") or []],
            "evaluations": evals, "pareto": pareto, "ranking": ranking, "proxy_cols": proxy_cols,
            "metric_label": metric_label}


def _family(record) -> dict[str, Any] | None:
    """The dev-declared sign-off family, its power plan, this run's test ledger, the
    persistent ledger's look (number, alpha, earlier looks) and the decision."""
    so = record.get("signoff") or {}
    fam = so.get("family") or {}
    if not fam.get("candidates") and not so.get("ledger"):
        return None
    rows = []
    tests = so.get("test") or {}
    for r in _get(so, "decision", "rows", default=[]) or []:
        name = r.get("candidate")
        t = tests.get(name) or {}
        interval = (f"{t['point']:+.4f} [{t['low']:+.4f}, {t['high']:+.4f}]"
                    if all(finite(t.get(k)) for k in ("point", "low", "high")) else NOT_MEASURED)
        rows.append({"candidate": _text(name), "raw": _text(r.get("raw_status")),
                     "status": _text(r.get("status")), "interval": interval,
                     "n": _text(t.get("n")), "flip_rate": _value_text(t.get("flip_rate")),
                     "icc": _value_text((t.get("groups") or {}).get("icc")),
                     "reason": _text(r.get("reason"))})
    plan = [{"candidate": _text(p.get("candidate")), "needed": _text(p.get("n_required")),
             "available": _text(p.get("n_available")),
             "adequate": "yes" if p.get("adequate") else "no",
             "planned_power": _value_text(p.get("planned_power")),
             "tested": "no" if p.get("tested") is False else "yes",
             "reason": _text(p.get("reason"))}
            for p in _get(so, "power_plan", "rows", default=[]) or []]
    ledger = so.get("test_ledger") or {}
    rec = so.get("recommendation") or {}
    alpha = so.get("alpha_one_sided")
    level = f"{100 * (1 - 2 * alpha):.4g}% CI" if finite(alpha) else "CI"
    return {"order": [str(c) for c in fam.get("candidates") or []],
            "method": _text(so.get("method")),
            "alpha": _alpha_text(alpha), "basis": _text(fam.get("basis_rule")
                                                         or fam.get("rule")),
            "ci": f"test delta [{level}]", "rows": rows, "plan": plan,
            "ledger": [f"{e.get('candidate')}: {e.get('n')} test examples"
                       for e in ledger.get("evaluations", []) or []],
            "evaluated_once": bool(ledger.get("evaluated_once")),
            "look": _look(so.get("ledger")),
            "not_tested": [f"{k}: {v}" for k, v in (so.get("not_tested") or {}).items()],
            "recommendation": _text(rec.get("reason")),
            "excluded": [f"{k}: {v}" for k, v in (rec.get("excluded") or {}).items()]}


def _alpha_text(a: Any) -> str:
    """A one-sided alpha with 4 significant digits (a look's alpha may be 0.000225)."""
    return f"{a:.4g}" if finite(a) else _value_text(a)


def _look(facts) -> dict[str, Any] | None:
    """The persistent test ledger's facts of this look (record.signoff.ledger), as text."""
    if not isinstance(facts, Mapping):
        return None
    earlier = []
    for e in facts.get("earlier_looks") or []:
        st = ", ".join(f"{c} {s}" for c, s in (e.get("statuses") or {}).items()) or \
            (e.get("state") or "")
        earlier.append(f"look {_text(e.get('look'))} ({str(e.get('id'))[:12]}, "
                       f"{_text(e.get('started'))}): one-sided alpha "
                       f"{_alpha_text(e.get('alpha_one_sided'))}, {_text(e.get('metric'))}, "
                       f"{st}; {_text(e.get('shared_examples'))} examples shared")
    read = bool(facts.get("read_from_ledger"))
    return {"summary": _text(facts.get("summary")), "path": _text(facts.get("path")),
            "id": _text(facts.get("look_id")), "rule": _text(facts.get("rule")),
            "same_data": _text(facts.get("same_data")),
            "alpha": _alpha_text(facts.get("alpha_one_sided")),
            "declared": _alpha_text(facts.get("alpha_declared")),
            "supersedes": _text(facts.get("supersedes")) if facts.get("supersedes") else "",
            "other_data_looks": int(facts.get("other_data_looks") or 0),
            "earlier": earlier, "read": read}


def _stages(record) -> list[dict[str, str]]:
    rows = []
    for name, st in (_get(record, "stages", default={}) or {}).items():
        if not isinstance(st, Mapping):
            continue
        extra = ", ".join(f"{k}={_text(v)}" for k, v in st.items() if k != "seconds")
        rows.append({"name": name, "seconds": num(st.get("seconds"), 2), "extra": extra})
    return rows


def _kernel_census(cands) -> dict[str, Any] | None:
    cols = [n for n, c in cands.items() if isinstance(c.get("kernel_census"), Mapping)]
    if not cols:
        return None
    ops: list[str] = []
    for n in cols:
        for op in cands[n]["kernel_census"]:
            if op not in ops:
                ops.append(op)
    ops.sort()
    return {"cols": cols, "rows": [{"op": op, "cells": [num(cands[n]["kernel_census"].get(op))
                                                        if op in cands[n]["kernel_census"] else DASH
                                                        for n in cols]} for op in ops]}
