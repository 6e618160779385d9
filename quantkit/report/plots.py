"""Plots for the sign-off report, drawn from RunRecord data only, returned as PNG bytes.

Matplotlib runs on the Agg canvas directly (``Figure`` + ``FigureCanvasAgg``, never pyplot),
so no display is touched and no global backend is switched. Output is deterministic:
defaults are reset inside an ``rc_context`` (a user's matplotlibrc does not leak in), fonts
are matplotlib's bundled DejaVu Sans, and the PNG carries no Software/time metadata, so the
same record gives the same bytes.

Each function returns a :class:`Plot` or None when the record has nothing to draw.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from quantkit.report.fmt import finite, short_name, status_rank

log = logging.getLogger(__name__)

__all__ = ["Plot", "activation_summary", "all_plots", "delta_ci", "floor_candidate",
           "layer_candidates", "pareto", "sqnr_per_layer", "worst_calibrated_tensors"]

STATUS_COLORS = {"PASS": "#1a7f37", "INCONCLUSIVE": "#b8860b", "FAIL": "#c62828"}
OTHER_COLOR = "#6e7781"
#: Calibrator / candidate colors, assigned in record order.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")

_RC = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "svg.hashsalt": "quantkit",
    "path.simplify": True,
}


@dataclass(frozen=True)
class Plot:
    """One rendered figure: a stable ``name`` (used as an HTML id), title, caption, PNG bytes."""

    name: str
    title: str
    caption: str
    png: bytes


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _draw(draw, *args, **kwargs) -> Plot | None:
    """Run ``draw`` under pinned matplotlib defaults; a drawing error logs and gives None."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(_RC)
        try:
            return draw(*args, **kwargs)
        except (ValueError, TypeError, KeyError) as err:  # malformed record section
            log.warning("could not draw %s: %s", getattr(draw, "__name__", draw), err)
            return None


# ----------------------------------------------------------------------------- selection

def floor_candidate(record: Mapping[str, Any]) -> str | None:
    """The candidate whose per-layer numbers are the FP16 floor ("fp16"), if it has layers."""
    cands = record.get("candidates") or {}
    c = cands.get("fp16")
    return "fp16" if isinstance(c, Mapping) and c.get("layers") else None


def layer_candidates(record: Mapping[str, Any]) -> list[str]:
    """Candidates with per-layer numbers, excluding the FP16 floor, in record order."""
    floor = floor_candidate(record)
    return [n for n, c in (record.get("candidates") or {}).items()
            if isinstance(c, Mapping) and c.get("layers") and n != floor]


def floor_sqnr(record: Mapping[str, Any], candidate: str, tensor: str) -> float | None:
    """FP16 SQNR of ``tensor``: the fp16 candidate's layers, else the flagged-layer entry."""
    cands = record.get("candidates") or {}
    floor = floor_candidate(record)
    if floor:
        value = (cands[floor]["layers"].get(tensor) or {}).get("sqnr_db")
        if value is not None:
            return value
    for f in (cands.get(candidate) or {}).get("flagged_layers") or []:
        if isinstance(f, Mapping) and f.get("name") == tensor:
            return f.get("fp16_sqnr_db")
    return None


def focus_candidate(record: Mapping[str, Any]) -> str | None:
    """The recommended candidate if it has per-layer numbers, else the first that has."""
    names = layer_candidates(record)
    rec = record.get("recommended")
    if rec in names:
        return rec
    return names[0] if names else None


def worst_calibrated_tensors(record: Mapping[str, Any], top_n: int = 6) -> tuple[list[str], str]:
    """Calibrated tensors with the lowest SQNR in the focus candidate, and how they were chosen.

    Falls back to the first ``top_n`` calibrated tensors (record order) when no candidate has
    per-layer numbers for them.
    """
    summary = (record.get("calibration") or {}).get("summary") or {}
    tensors = list(summary)
    focus = focus_candidate(record)
    if focus:
        layers = record["candidates"][focus]["layers"]
        scored = [t for t in tensors if finite((layers.get(t) or {}).get("sqnr_db"))]
        if scored:
            scored.sort(key=lambda t: layers[t]["sqnr_db"])
            return scored[:top_n], f"lowest SQNR in {focus}"
    return tensors[:top_n], "first calibrated tensors in graph order"


# ----------------------------------------------------------------------------- plots

def sqnr_per_layer(record: Mapping[str, Any]) -> Plot | None:
    """(a) SQNR per layer of every INT8 candidate against the FP16 floor."""
    names = layer_candidates(record)
    if not names:
        return None
    return _draw(_sqnr_per_layer, record, names)


def _sqnr_per_layer(record, names) -> Plot | None:
    cands = record["candidates"]
    fig = _figure(10.0, 4.2)
    ax = fig.add_subplot()
    drawn = False
    floor = floor_candidate(record)
    order = list(cands[floor]["layers"]) if floor else list(cands[names[0]]["layers"])
    fx = [i for i, t in enumerate(order) if finite(floor_sqnr(record, names[0], t))]
    fy = [floor_sqnr(record, names[0], order[i]) for i in fx]
    if fx:
        ax.plot(fx, fy, color="black", linestyle="--", linewidth=1.2, label="FP16 floor")
        drawn = True
    for k, name in enumerate(names):
        layers = cands[name]["layers"]
        pts = [(i, v.get("sqnr_db")) for i, v in enumerate(layers.values())
               if isinstance(v, Mapping) and finite(v.get("sqnr_db"))]
        if not pts:
            continue
        color = PALETTE[k % len(PALETTE)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                linewidth=1.0, color=color, label=name)
        first = cands[name].get("first_diverging")
        if first in layers and finite(layers[first].get("sqnr_db")):
            ax.plot([list(layers).index(first)], [layers[first]["sqnr_db"]], marker="*",
                    markersize=12, color=color, markeredgecolor="black", linestyle="none")
        drawn = True
    if not drawn:
        return None
    ax.set_xlabel("layer index (topological order of the compared tensors)")
    ax.set_ylabel("SQNR vs FP32 (dB, higher is better)")
    ax.set_title("Per-layer SQNR: INT8 candidates vs the FP16 floor (★ = first diverging tensor)")
    ax.legend(loc="best", fontsize=8)
    return Plot("sqnr", "Per-layer SQNR vs FP16 floor",
                "SQNR of each compared tensor against FP32, in graph order; the dashed line is "
                "the FP16 artifact (the floor INT8 is judged against).", _png(fig))


def activation_summary(record: Mapping[str, Any], top_n: int = 6) -> Plot | None:
    """(b) Calibration summary of the worst tensors with each calibrator's amax as lines."""
    cal = record.get("calibration") or {}
    if not cal.get("summary"):
        return None
    return _draw(_activation_summary, record, top_n)


_LADDER = (("p99", "p99"), ("p99_9", "p99.9"), ("p99_99", "p99.99"), ("amax", "max |x|"))


def _activation_summary(record, top_n) -> Plot | None:
    cal = record["calibration"]
    summary, amax = cal["summary"], cal.get("amax") or {}
    tensors, how = worst_calibrated_tensors(record, top_n)
    if not tensors:
        return None
    focus = focus_candidate(record)
    ncols = min(3, len(tensors))
    nrows = (len(tensors) + ncols - 1) // ncols
    fig = _figure(10.0, 2.3 * nrows + 0.8)
    methods = list(amax)
    handles = {}
    for i, t in enumerate(tensors):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        s = summary.get(t) or {}
        rows = [(label, s.get(key)) for key, label in _LADDER if finite(s.get(key))]
        ys = list(range(len(rows)))
        ax.barh(ys, [v for _, v in rows], color="#9ecae1", edgecolor="#3182bd", height=0.6)
        ax.set_yticks(ys, [label for label, _ in rows])
        for k, m in enumerate(methods):
            a = (amax.get(m) or {}).get(t)
            if finite(a):
                h = ax.axvline(a, color=PALETTE[k % len(PALETTE)], linewidth=1.5,
                               linestyle=("-", "--", "-.", ":")[k % 4])
                handles.setdefault(m, h)
        title = short_name(t, 46)
        if focus:
            q = (record["candidates"][focus]["layers"].get(t) or {}).get("sqnr_db")
            if finite(q):
                title += f"\nSQNR {q:.1f} dB ({focus})"
        ax.set_title(title, fontsize=8)
        xl = "|x| (calibration pass)"
        if finite(s.get("std")):
            xl += f"; x std {s['std']:.3g}, n={s.get('count', '?')}"
        ax.set_xlabel(xl, fontsize=7)
        ax.tick_params(labelsize=7)
    if handles:
        fig.legend(list(handles.values()), [f"{m} amax" for m in handles], loc="outside lower center",
                   ncol=min(len(handles), 5), fontsize=8)
    fig.suptitle("Activation summary of the worst calibrated tensors (percentiles of |x|, "
                 "not a histogram); lines = calibrator amax", fontsize=10)
    return Plot("activations", "Activation summary and calibrator ranges",
                f"Tensors chosen by {how}. Bars are the calibration pass's percentiles of |x| "
                "and its maximum; the record keeps these summaries, not full histograms. "
                "Vertical lines are the amax each calibrator chose.", _png(fig))


def search_interval(value: Any) -> tuple[float, float] | None:
    if isinstance(value, Mapping):
        lo, hi = value.get("low"), value.get("high")
    elif isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2:
        lo, hi = value
    else:
        return None
    return (lo, hi) if finite(lo) and finite(hi) else None


def search_k(ev: Mapping[str, Any]) -> Any:
    """FP16 node count of a search evaluation: ``fp16_count``, else len(fp16_set), else k."""
    if finite(ev.get("fp16_count")):
        return ev["fp16_count"]
    if isinstance(ev.get("fp16_set"), Sequence) and not isinstance(ev.get("fp16_set"), str):
        return len(ev["fp16_set"])
    return ev.get("k")


def search_margin(evals: Sequence[Any]) -> tuple[str | None, float | None]:
    """(metric name, absolute margin) when the evaluations' metric is their verdict's delta.

    quantkit's search records ``metric`` = the verdict's primary-metric delta vs FP32 and the
    verdict under ``extra.verdict``; only then is a -margin line meaningful on the plot.
    """
    for e in evals:
        v = (e.get("extra") or {}).get("verdict") if isinstance(e, Mapping) else None
        if not isinstance(v, Mapping):
            continue
        name = v.get("metric") or (v.get("margin") or {}).get("metric")
        point = ((v.get("deltas") or {}).get(name) or {}).get("point")
        margin = (v.get("margin") or {}).get("abs")
        if finite(point) and finite(search_metric(e)) and point == search_metric(e) and finite(margin):
            return name, float(margin)
        return None, None
    return None, None


def search_metric(ev: Mapping[str, Any]) -> Any:
    m = ev.get("metric")
    if isinstance(m, Mapping):  # {"name": ..., "value": ...}
        m = m.get("value")
    return m


def pareto(record: Mapping[str, Any]) -> Plot | None:
    """(c) FP16 layer count vs metric with interval bars, when a precision search ran."""
    evals = (record.get("search") or {}).get("evaluations") or []
    if not any(isinstance(e, Mapping) and finite(search_k(e)) and finite(search_metric(e)) for e in evals):
        return None
    return _draw(_pareto, record)


def _pareto(record) -> Plot | None:
    from matplotlib.ticker import MaxNLocator

    search = record["search"]
    evals = [e for e in search["evaluations"]
             if isinstance(e, Mapping) and finite(search_k(e)) and finite(search_metric(e))]
    ivs = [search_interval(e.get("interval")) for e in evals]
    # An interval that brackets the metric is drawn as error bars on it; otherwise (e.g. an
    # interval of the delta vs FP32) it gets its own panel, as recorded.
    around = all(iv is None or iv[0] <= search_metric(e) <= iv[1] for e, iv in zip(evals, ivs))
    separate = not around and any(iv is not None for iv in ivs)
    fig = _figure(8.0, 6.0 if separate else 4.2)
    ax = fig.add_subplot(2, 1, 1) if separate else fig.add_subplot()
    ax2 = fig.add_subplot(2, 1, 2, sharex=ax) if separate else None
    statuses = sorted({e.get("status") for e in evals}, key=lambda s: (status_rank(s), str(s)))
    for status in statuses:
        idx = [i for i, e in enumerate(evals) if e.get("status") == status]
        color = STATUS_COLORS.get(status, OTHER_COLOR)
        xs = [search_k(evals[i]) for i in idx]
        ys = [search_metric(evals[i]) for i in idx]
        if around:
            lo = [ys[j] - ivs[i][0] if ivs[i] else 0.0 for j, i in enumerate(idx)]
            hi = [ivs[i][1] - ys[j] if ivs[i] else 0.0 for j, i in enumerate(idx)]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, markersize=4, color=color,
                        label=str(status))
        else:
            ax.plot(xs, ys, "o", markersize=4, color=color, label=str(status))
        if ax2 is not None:
            with_iv = [i for i in idx if ivs[i]]
            if with_iv:
                ax2.vlines([search_k(evals[i]) for i in with_iv], [ivs[i][0] for i in with_iv],
                           [ivs[i][1] for i in with_iv], color=color, linewidth=2)
    front = []
    for p in search.get("pareto") or []:
        if isinstance(p, Mapping) and finite(search_k(p)) and finite(search_metric(p)):
            front.append((search_k(p), search_metric(p)))
        elif isinstance(p, int) and 0 <= p < len(search["evaluations"]):
            e = search["evaluations"][p]
            if isinstance(e, Mapping) and finite(search_k(e)) and finite(search_metric(e)):
                front.append((search_k(e), search_metric(e)))
    if front:
        front.sort()
        ax.plot([f[0] for f in front], [f[1] for f in front], color="black", linewidth=1,
                linestyle="--", label="Pareto front")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    counts = [search_k(e) for e in evals]
    if max(counts) - min(counts) < 2:  # one or two sizes: keep integer ticks around them
        ax.set_xlim(min(counts) - 1, max(counts) + 1)
    metric_name, margin = search_margin(evals)
    if margin is not None:
        ax.axhline(-margin, color="#c62828", linestyle="--", linewidth=1.2,
                   label=f"-margin = {-margin:+.4f}")
        ax.axhline(0.0, color="grey", linewidth=1)
    ylabel = f"{metric_name} delta vs FP32" if metric_name else "metric"
    ax.set_ylabel(ylabel + (" (bars: interval)" if around else ""))
    ax.set_title("Precision search: layers kept in FP16 vs " + ylabel)
    ax.legend(loc="best", fontsize=8)
    if ax2 is not None:
        ax2.set_ylabel("recorded interval")
        ax2.set_xlabel("layers kept in FP16")
    else:
        ax.set_xlabel("layers kept in FP16")
    return Plot("pareto", "Precision search (Pareto / sensitivity)",
                "Each point is one evaluated FP16 set on dev; color is the status of that dev "
                "evaluation (a choice, not signed off); "
                + ("bars are the recorded intervals." if around else
                   "the lower panel shows each evaluation's recorded interval."), _png(fig))


def _verdict_rows(record) -> list[tuple[str, str, dict]]:
    rows = []
    for name, c in (record.get("candidates") or {}).items():
        v = c.get("verdict") if isinstance(c, Mapping) else None
        if not isinstance(v, Mapping):
            continue
        metric = v.get("metric") or (v.get("margin") or {}).get("metric")
        d = (v.get("deltas") or {}).get(metric) if metric else None
        if isinstance(d, Mapping) and finite(d.get("point")):
            rows.append((name, v.get("status"), d))
    return rows


def delta_ci(record: Mapping[str, Any]) -> Plot | None:
    """(d) Metric delta vs FP32 with its interval per candidate, and the -margin line."""
    if not _verdict_rows(record):
        return None
    return _draw(_delta_ci, record)


def _delta_ci(record) -> Plot | None:
    rows = _verdict_rows(record)
    first = next(c["verdict"] for c in record["candidates"].values()
                 if isinstance(c, Mapping) and isinstance(c.get("verdict"), Mapping))
    metric = first.get("metric") or (first.get("margin") or {}).get("metric") or "metric"
    mg = first.get("margin") or {}
    margin = mg.get("abs")
    # label-free: the interval is of a share (agreement, or examples within the tolerance)
    floor_key = next((k for k in ("min_share", "min_agreement") if finite(mg.get(k))), None)
    fig = _figure(8.0, 0.55 * len(rows) + 1.6)
    ax = fig.add_subplot()
    from quantkit.report.status import verdict_view

    rec = record.get("recommended")
    views = {name: verdict_view(record, name, status) for name, status, _ in rows}
    for i, (name, status, d) in enumerate(rows):
        y = len(rows) - 1 - i
        lo = d["point"] - d["low"] if finite(d.get("low")) else 0.0
        hi = d["high"] - d["point"] if finite(d.get("high")) else 0.0
        ax.errorbar([d["point"]], [y], xerr=[[lo], [hi]], fmt="o", capsize=4, markersize=6,
                    color=OTHER_COLOR if views[name].dev_only
                    else STATUS_COLORS.get(status, OTHER_COLOR))
    labels = [f"{name}{' (recommended)' if name == rec else ''}\n"
              + views[name].text.replace("; ", "\n") for name, _, _ in rows]
    ax.set_yticks(list(range(len(rows)))[::-1], labels)
    level = rows[0][2].get("level")
    lvl = f"{level * 100:g}% " if finite(level) else ""
    if floor_key is not None:
        what = ("agreement with FP32" if floor_key == "min_agreement" else
                f"share of examples within the {metric} tolerance")
        ax.axvline(mg[floor_key], color="#c62828", linestyle="--", linewidth=1.2,
                   label=f"declared minimum = {mg[floor_key]:.4f}")
        ax.legend(loc="best", fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_xlabel(what)
        ax.set_title(f"{what} with {lvl}interval per candidate")
        return Plot("delta", f"{what} vs the declared minimum",
                    "PASS needs the whole interval right of the declared minimum; FAIL needs "
                    "it entirely left of it; otherwise INCONCLUSIVE.", _png(fig))
    ax.axvline(0.0, color="grey", linewidth=1)
    if finite(margin):
        ax.axvline(-margin, color="#c62828", linestyle="--", linewidth=1.2,
                   label=f"-margin = {-margin:+.4f}")
        ax.legend(loc="best", fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"{metric} delta vs FP32 (candidate - reference)")
    ax.set_title(f"{metric} delta with {lvl}interval per candidate")
    dev_only = [n for n, view in views.items() if view.dev_only]
    return Plot("delta", f"{metric} delta vs the margin",
                "PASS needs the whole interval right of the -margin line; FAIL needs it "
                "entirely left of it; otherwise INCONCLUSIVE (or FAIL on a regressed slice)."
                + (f" Grey, dev verdicts, not signed off: {', '.join(dev_only)} (their "
                   "intervals are on dev; the others' on test)." if dev_only else ""),
                _png(fig))


def all_plots(record: Mapping[str, Any]) -> list[Plot]:
    """Every plot the record has data for, in report order."""
    out = []
    for fn in (delta_ci, sqnr_per_layer, activation_summary, pareto):
        p = fn(record)
        if p is not None:
            out.append(p)
    return out
