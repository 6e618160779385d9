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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from quantkit.record.migrate import as_record
from quantkit.record.run_record import RunRecord
from quantkit.record.search import SearchEval
from quantkit.record.verdict import Interval
from quantkit.report import layer_selection
from quantkit.report.fmt import finite, short_name, status_rank
from quantkit.report.layer_selection import floor_sqnr, focus_candidate
from quantkit.report.status import verdict_view

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


def _draw(draw: Callable[..., Plot | None], *args: object, **kwargs: object) -> Plot | None:
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

def floor_candidate(record: RunRecord | Mapping[str, object]) -> str | None:
    """The candidate whose per-layer numbers are the FP16 floor ("fp16"), if it has layers."""
    return layer_selection.floor_candidate(as_record(record))


def layer_candidates(record: RunRecord | Mapping[str, object]) -> list[str]:
    """Candidates with per-layer numbers, excluding the FP16 floor, in record order."""
    return layer_selection.layer_candidates(as_record(record))


def worst_calibrated_tensors(record: RunRecord | Mapping[str, object],
                             top_n: int = 6) -> tuple[list[str], str]:
    """Calibrated tensors with the lowest SQNR in the focus candidate, and how they were chosen."""
    return layer_selection.worst_tensors(as_record(record), top_n)


# ----------------------------------------------------------------------------- plots

def sqnr_per_layer(record: RunRecord | Mapping[str, object]) -> Plot | None:
    """(a) SQNR per layer of every INT8 candidate against the FP16 floor."""
    record = as_record(record)
    names = layer_candidates(record)
    if not names:
        return None
    return _draw(_sqnr_per_layer, record, names)


def _sqnr_per_layer(record, names) -> Plot | None:
    cands = record.candidates
    fig = _figure(10.0, 4.2)
    ax = fig.add_subplot()
    drawn = False
    floor = floor_candidate(record)
    order = list(cands[floor].layers or {}) if floor else list(cands[names[0]].layers or {})
    fx = [i for i, t in enumerate(order) if finite(floor_sqnr(record, names[0], t))]
    fy = [floor_sqnr(record, names[0], order[i]) for i in fx]
    if fx:
        ax.plot(fx, fy, color="black", linestyle="--", linewidth=1.2, label="FP16 floor")
        drawn = True
    for k, name in enumerate(names):
        layers = cands[name].layers or {}
        pts = [(i, v.sqnr_db) for i, v in enumerate(layers.values()) if finite(v.sqnr_db)]
        if not pts:
            continue
        color = PALETTE[k % len(PALETTE)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                linewidth=1.0, color=color, label=name)
        first = cands[name].first_diverging
        if first in layers and finite(layers[first].sqnr_db):
            ax.plot([list(layers).index(first)], [layers[first].sqnr_db], marker="*",
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


def activation_summary(record: RunRecord | Mapping[str, object], top_n: int = 6) -> Plot | None:
    """(b) Calibration summary of the worst tensors with each calibrator's amax as lines."""
    record = as_record(record)
    if record.calibration is None or not record.calibration.summary:
        return None
    return _draw(_activation_summary, record, top_n)


_LADDER = (("p99", "p99"), ("p99_9", "p99.9"), ("p99_99", "p99.99"), ("amax", "max |x|"))


def _activation_summary(record, top_n) -> Plot | None:
    cal = record.calibration
    tensors, how = worst_calibrated_tensors(record, top_n)
    if not tensors:
        return None
    focus = focus_candidate(record)
    ncols = min(3, len(tensors))
    nrows = (len(tensors) + ncols - 1) // ncols
    fig = _figure(10.0, 2.3 * nrows + 0.8)
    methods = list(cal.amax)
    handles = {}
    for i, t in enumerate(tensors):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        s = cal.summary[t]
        rows = [(label, getattr(s, key)) for key, label in _LADDER if finite(getattr(s, key))]
        ys = list(range(len(rows)))
        ax.barh(ys, [v for _, v in rows], color="#9ecae1", edgecolor="#3182bd", height=0.6)
        ax.set_yticks(ys, [label for label, _ in rows])
        for k, m in enumerate(methods):
            a = cal.amax_of(m, t)
            if finite(a):
                h = ax.axvline(a, color=PALETTE[k % len(PALETTE)], linewidth=1.5,
                               linestyle=("-", "--", "-.", ":")[k % 4])
                handles.setdefault(m, h)
        title = short_name(t, 46)
        if focus:
            q = record.candidates[focus].layer_sqnr(t)
            if finite(q):
                title += f"\nSQNR {q:.1f} dB ({focus})"
        ax.set_title(title, fontsize=8)
        xl = "|x| (calibration pass)"
        if finite(s.std):
            xl += f"; x std {s.std:.3g}, n={s.count}"
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


def search_margin(evals: Sequence[SearchEval]) -> tuple[str | None, float | None]:
    """(metric name, absolute margin) when the evaluations' metric is their verdict's delta.

    quantkit's search records ``metric`` = the verdict's primary-metric delta vs FP32 and the
    verdict under ``extra.verdict``; only then is a -margin line meaningful on the plot.
    """
    for e in evals:
        v = e.extra.verdict
        name = v.decision_metric
        d = v.delta(name)
        point = d.point if d is not None else None
        margin = v.margin.labelled.abs if v.margin.labelled is not None else None
        if finite(point) and finite(e.metric) and point == e.metric and finite(margin):
            return name, float(margin)
        return None, None
    return None, None


def pareto(record: RunRecord | Mapping[str, object]) -> Plot | None:
    """(c) FP16 layer count vs metric with interval bars, when a precision search ran."""
    record = as_record(record)
    evals = record.search_run.evaluations if record.search_run is not None else []
    if not any(finite(e.fp16_count) and finite(e.metric) for e in evals):
        return None
    return _draw(_pareto, record)


def _pareto(record: RunRecord) -> Plot | None:
    from matplotlib.ticker import MaxNLocator

    search = record.search_run
    evals = [e for e in search.evaluations if finite(e.fp16_count) and finite(e.metric)]
    ivs = [e.bounds for e in evals]
    # An interval that brackets the metric is drawn as error bars on it; otherwise (e.g. an
    # interval of the delta vs FP32) it gets its own panel, as recorded.
    around = all(iv is None or iv[0] <= e.metric <= iv[1] for e, iv in zip(evals, ivs))
    separate = not around and any(iv is not None for iv in ivs)
    fig = _figure(8.0, 6.0 if separate else 4.2)
    ax = fig.add_subplot(2, 1, 1) if separate else fig.add_subplot()
    ax2 = fig.add_subplot(2, 1, 2, sharex=ax) if separate else None
    statuses = sorted({e.status for e in evals}, key=lambda s: (status_rank(s), str(s)))
    for status in statuses:
        idx = [i for i, e in enumerate(evals) if e.status == status]
        color = STATUS_COLORS.get(status, OTHER_COLOR)
        xs = [evals[i].fp16_count for i in idx]
        ys = [evals[i].metric for i in idx]
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
                ax2.vlines([evals[i].fp16_count for i in with_iv], [ivs[i][0] for i in with_iv],
                           [ivs[i][1] for i in with_iv], color=color, linewidth=2)
    front = [(p.fp16_count, p.metric) for p in search.pareto
             if finite(p.fp16_count) and finite(p.metric)]
    if front:
        front.sort()
        ax.plot([f[0] for f in front], [f[1] for f in front], color="black", linewidth=1,
                linestyle="--", label="Pareto front")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    counts = [e.fp16_count for e in evals]
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


def _verdict_rows(record: RunRecord) -> list[tuple[str, str, Interval]]:
    rows = []
    for name, c in record.candidates.items():
        v = c.verdict
        if v is None:
            continue
        metric = v.decision_metric
        d = v.delta(metric) if metric else None
        if d is not None and finite(d.point):
            rows.append((name, v.status, d))
    return rows


def delta_ci(record: RunRecord | Mapping[str, object]) -> Plot | None:
    """(d) Metric delta vs FP32 with its interval per candidate, and the -margin line."""
    record = as_record(record)
    if not _verdict_rows(record):
        return None
    return _draw(_delta_ci, record)


def _delta_ci(record: RunRecord) -> Plot | None:
    rows = _verdict_rows(record)
    first = next(c.verdict for c in record.candidates.values() if c.verdict is not None)
    metric = first.decision_metric or "metric"
    mg = first.margin
    margin = mg.labelled.abs if mg.labelled is not None else None
    # label-free: the interval is of a share (agreement, or examples within the tolerance)
    floor_key, floor = next(((k, x) for k, x in (
        ("min_share", mg.share.min_share if mg.share is not None else None),
        ("min_agreement", mg.min_agreement)) if finite(x)), (None, None))
    fig = _figure(8.0, 0.55 * len(rows) + 1.6)
    ax = fig.add_subplot()
    rec = record.recommended
    views = {name: verdict_view(record, name, status) for name, status, _ in rows}
    for i, (name, status, d) in enumerate(rows):
        y = len(rows) - 1 - i
        lo = d.point - d.low if finite(d.low) else 0.0
        hi = d.high - d.point if finite(d.high) else 0.0
        ax.errorbar([d.point], [y], xerr=[[lo], [hi]], fmt="o", capsize=4, markersize=6,
                    color=OTHER_COLOR if views[name].dev_only
                    else STATUS_COLORS.get(status, OTHER_COLOR))
    labels = [f"{name}{' (recommended)' if name == rec else ''}\n"
              + views[name].text.replace("; ", "\n") for name, _, _ in rows]
    ax.set_yticks(list(range(len(rows)))[::-1], labels)
    level = rows[0][2].level
    lvl = f"{level * 100:g}% " if finite(level) else ""
    if floor_key is not None:
        what = ("agreement with FP32" if floor_key == "min_agreement" else
                f"share of examples within the {metric} tolerance")
        ax.axvline(floor, color="#c62828", linestyle="--", linewidth=1.2,
                   label=f"declared minimum = {floor:.4f}")
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


def pr_curves(record: RunRecord | Mapping[str, object]) -> Plot | None:
    """A detector's precision-recall curves (COCO's 101 recall points, mean over classes),
    FP32 and every candidate: at IoU 0.5 and averaged over IoU 0.5:0.95; against the labels,
    or (label-free) against FP32's detections."""
    record = as_record(record)
    if not any(c.detection is not None for c in record.candidates.values()):
        return None
    return _draw(_pr_curves, record)


def _pr_curves(record: RunRecord) -> Plot | None:
    fig = _figure(10.0, 3.8)
    axes = fig.subplots(1, 2)
    drawn, labelled = False, False
    for name, c in record.candidates.items():
        d = c.detection
        if d is None:
            continue
        labelled = labelled or d.labelled
        curves = ((d.pr50, d.pr) if d.labelled else
                  (d.vs_fp32.pr50, d.vs_fp32.pr) if d.vs_fp32 is not None else (None, None))
        for ax, pr in zip(axes, curves):
            if not pr:
                continue
            xs = [i / (len(pr) - 1) for i, v in enumerate(pr) if finite(v)]
            ys = [v for v in pr if finite(v)]
            if xs:
                ax.plot(xs, ys, label=name, linewidth=1.2,
                        linestyle="--" if name == "fp32" else "-")
                drawn = True
    if not drawn:
        return None
    for ax, title in zip(axes, ("IoU 0.5", "IoU 0.5:0.95 (mean)")):
        ax.set_title(title)
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
    axes[0].legend(loc="lower left", fontsize=7)
    against = "the labels" if labelled else "FP32's detections as ground truth (label-free)"
    return Plot("pr_curves", "precision-recall curves",
                f"Interpolated precision at COCO's 101 recall points, mean over the classes "
                f"with ground truth, against {against}; each candidate on the split its entry "
                "is on.", _png(fig))


def all_plots(record: RunRecord | Mapping[str, object]) -> list[Plot]:
    """Every plot the record has data for, in report order."""
    record = as_record(record)
    out = []
    for fn in (delta_ci, sqnr_per_layer, activation_summary, pareto, pr_curves):
        p = fn(record)
        if p is not None:
            out.append(p)
    return out
