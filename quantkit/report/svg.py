"""Small inline SVG charts for the report, drawn by our own code from RunRecord data only.

- :func:`agreement_by_slice`: top-1 agreement with FP32 per slice value (class, FP32's
  predicted class, token-length bucket), one bar per candidate per slice value.
- :func:`cosine_histogram`: for embedding runs, the histogram of per-example cosine to FP32
  of each candidate (the bins recorded in ``embedding_fp32.cosine.hist``).

Deterministic text (same record, same bytes); every bar is a ``<rect class="qk-bar">``
and every histogram bin a ``<rect class="qk-bin">``, so tests can count them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from quantkit.record.migrate import as_record
from quantkit.record.run_record import RunRecord

__all__ = ["SvgPlot", "agreement_by_slice", "all_svg_plots", "cosine_histogram"]

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class SvgPlot:
    """One chart: a stable ``name`` (HTML id), title, caption and the ``<svg>`` text."""

    name: str
    title: str
    caption: str
    svg: str


def _f(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def agreement_by_slice(record: RunRecord | Mapping[str, object]) -> SvgPlot | None:
    """Grouped bars: x = slice value, one bar per candidate (``agreement_slices``)."""
    cands = {n: c for n, c in as_record(record).candidates.items() if c.agreement_slices}
    if not cands:
        return None
    keys: list[tuple[str, str]] = []
    for c in cands.values():
        for s, values in (c.agreement_slices or {}).items():
            for v in values:
                if (s, v) not in keys:
                    keys.append((s, v))
    names = list(cands)
    bar_w, gap, left, top, plot_h = 12.0, 14.0, 44.0, 28.0, 160.0
    group_w = bar_w * len(names) + gap
    width = left + group_w * len(keys) + 20.0
    legend_h = 16.0 * len(names)
    height = top + plot_h + 56.0 + legend_h
    lo = min((1.0 if st.agreement is None else st.agreement for c in cands.values()
              for vals in (c.agreement_slices or {}).values() for st in vals.values()),
             default=1.0)
    y0 = max(0.0, min(0.9, (int(lo * 20) / 20.0)))  # axis floor: a multiple of 0.05

    def y_of(a: float) -> float:
        return top + plot_h * (1.0 - (a - y0) / (1.0 - y0 or 1.0))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="qk-plot" '
             f'viewBox="0 0 {_f(width)} {_f(height)}" width="{_f(width)}" '
             f'height="{_f(height)}" role="img" aria-label="agreement with FP32 by slice">',
             f'<text x="{_f(left)}" y="16" font-size="12">top-1 agreement with FP32 by slice '
             f'(axis from {y0:g})</text>']
    for tick in (y0, (y0 + 1.0) / 2, 1.0):
        y = y_of(tick)
        parts.append(f'<line x1="{_f(left)}" x2="{_f(width - 10)}" y1="{_f(y)}" y2="{_f(y)}" '
                     f'stroke="#ccc"/><text x="{_f(left - 4)}" y="{_f(y + 3)}" font-size="9" '
                     f'text-anchor="end">{tick:.3g}</text>')
    for gi, (s, v) in enumerate(keys):
        x0 = left + gi * group_w + gap / 2
        for ci, name in enumerate(names):
            st = cands[name].agreement_stat(s, v)
            if st is None:
                continue
            a = float(0.0 if st.agreement is None else st.agreement)
            y = y_of(max(a, y0))
            parts.append(
                f'<rect class="qk-bar" data-candidate={quoteattr(name)} '
                f'data-slice={quoteattr(f"{s}={v}")} x="{_f(x0 + ci * bar_w)}" y="{_f(y)}" '
                f'width="{_f(bar_w - 1)}" height="{_f(top + plot_h - y)}" '
                f'fill="{PALETTE[ci % len(PALETTE)]}"><title>{escape(name)} {escape(s)}='
                f'{escape(str(v))}: agreement {a:.4f} (n={st.n})</title></rect>')
        parts.append(f'<text x="{_f(x0 + bar_w * len(names) / 2)}" '
                     f'y="{_f(top + plot_h + 14)}" font-size="9" text-anchor="middle">'
                     f'{escape(str(v))}</text><text x="{_f(x0 + bar_w * len(names) / 2)}" '
                     f'y="{_f(top + plot_h + 26)}" font-size="8" fill="#666" '
                     f'text-anchor="middle">{escape(s)}</text>')
    for ci, name in enumerate(names):
        y = top + plot_h + 44 + 16 * ci
        split = cands[name].split
        parts.append(f'<rect x="{_f(left)}" y="{_f(y - 9)}" width="10" height="10" '
                     f'fill="{PALETTE[ci % len(PALETTE)]}"/><text x="{_f(left + 14)}" '
                     f'y="{_f(y)}" font-size="10">{escape(name)}'
                     f'{" (" + escape(str(split)) + ")" if split else ""}</text>')
    parts.append("</svg>")
    return SvgPlot("agreement-slices", "Agreement with FP32 by slice",
                   "Each bar is one candidate's top-1 agreement with FP32 on one slice value "
                   "(its split in the legend: test for the signed-off family, dev otherwise). "
                   "Slices: class (labels), fp32_class (FP32's prediction, label-free), "
                   "length (tokens).", "".join(parts))


def cosine_histogram(record: RunRecord | Mapping[str, object]) -> SvgPlot | None:
    """One small histogram per candidate of its per-example cosine to FP32."""
    cands = {n: c.embedding_fp32.cosine for n, c in as_record(record).candidates.items()
             if c.embedding_fp32 is not None}
    if not cands:
        return None
    panel_w, panel_h, pad, top = 240.0, 110.0, 16.0, 22.0
    cols = min(3, len(cands))
    rows = -(-len(cands) // cols)
    width = cols * (panel_w + pad) + pad
    height = rows * (panel_h + top + 34.0) + pad
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="qk-plot" '
             f'viewBox="0 0 {_f(width)} {_f(height)}" width="{_f(width)}" '
             f'height="{_f(height)}" role="img" aria-label="per-example cosine histograms">']
    for i, (name, cos) in enumerate(cands.items()):
        counts, edges = cos.hist.counts, cos.hist.edges
        px = pad + (i % cols) * (panel_w + pad)
        py = pad + (i // cols) * (panel_h + top + 34.0)
        peak = max(max(counts), 1)
        bw = panel_w / max(len(counts), 1)
        parts.append(f'<text x="{_f(px)}" y="{_f(py + 12)}" font-size="11">{escape(name)}: '
                     f'mean {cos.mean:.5f}, p1 {cos.p1:.5f}, '
                     f'n={cos.n}</text>')
        base = py + top + panel_h
        for b, k in enumerate(counts):
            h = panel_h * k / peak
            parts.append(f'<rect class="qk-bin" data-candidate={quoteattr(name)} '
                         f'x="{_f(px + b * bw)}" y="{_f(base - h)}" width="{_f(max(bw - 1, 0.5))}" '
                         f'height="{_f(h)}" fill="{PALETTE[i % len(PALETTE)]}"><title>'
                         f'[{edges[b]:.5f}, {edges[b + 1]:.5f}): {k}</title></rect>')
        parts.append(f'<line x1="{_f(px)}" x2="{_f(px + panel_w)}" y1="{_f(base)}" '
                     f'y2="{_f(base)}" stroke="#333"/><text x="{_f(px)}" y="{_f(base + 12)}" '
                     f'font-size="9">{edges[0]:.4f}</text><text x="{_f(px + panel_w)}" '
                     f'y="{_f(base + 12)}" font-size="9" text-anchor="end">{edges[-1]:.4f}'
                     f'</text>')
    parts.append("</svg>")
    return SvgPlot("cosine-histogram", "Per-example cosine to FP32",
                   "One histogram per candidate of the cosine similarity of each example's "
                   "embedding to FP32's (bins from the record); a long left tail is what a "
                   "mean near 1 hides.", "".join(parts))


def all_svg_plots(record: RunRecord | Mapping[str, object]) -> list[SvgPlot]:
    """Every SVG chart the record has data for, in report order."""
    record = as_record(record)
    return [p for p in (agreement_by_slice(record), cosine_histogram(record)) if p is not None]
