"""Inline SVG plots in the HTML report: agreement by slice (one bar per candidate per slice
value) and, for embedding runs, a per-example cosine histogram per candidate."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

import tinyworld  # noqa: E402
from builders import bare_record, candidate, verdict  # noqa: E402

from quantkit.report.svg import agreement_by_slice, cosine_histogram  # noqa: E402


def _bars(html: str, cls: str) -> list[str]:
    return re.findall(rf'<rect class="{cls}" data-candidate="([^"]*)"', html)


def test_svg_from_a_synthetic_record_counts_and_escapes():
    rec = bare_record(candidates={
        "fp32": candidate(),
        "int8.<a>": candidate(split="test", agreement_slices={
            "class": {"0": {"agreement": 0.97, "n": 40}, "1": {"agreement": 1.0, "n": 40}},
            "length": {"<=16": {"agreement": 0.99, "n": 80}}}),
        "fp16": candidate(split="test", agreement_slices={
            "class": {"0": {"agreement": 1.0, "n": 40}, "1": {"agreement": 1.0, "n": 40}}}),
    })
    p = agreement_by_slice(rec)
    assert p is not None and len(_bars(p.svg, "qk-bar")) == 5
    assert "int8.&lt;a&gt;" in p.svg and "<a>" not in p.svg
    assert cosine_histogram(rec) is None
    rec["candidates"]["fp16"]["embedding_fp32"] = {"cosine": {
        "n": 3, "mean": 0.99, "min": 0.9, "p1": 0.98, "p5": 0.98, "median": 0.99, "p95": 1.0,
        "max": 1.0, "hist": {"counts": [1, 0, 2], "edges": [0.9, 0.95, 0.98, 1.0]}},
        "recall_k": 10}
    h = cosine_histogram(rec)
    assert len(_bars(h.svg, "qk-bin")) == 3
    assert agreement_by_slice(rec).svg == p.svg  # deterministic


#: snippets of this module's label_free_world (tests/conftest.py)
WORLD_ROWS = 600


def _run(world, name, *extra):
    r, run_dir = tinyworld.run_in(world, name, "precision.search.enabled=false", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    return (json.loads((run_dir / "record.json").read_text()),
            (run_dir / "report.html").read_text(encoding="utf-8"))


def test_agreement_by_slice_bars_in_a_tiny_world_report(label_free_world):
    rec, html = _run(label_free_world, "logits")
    with_slices = {n: c for n, c in rec["candidates"].items() if c.get("agreement_slices")}
    assert "fp32" not in with_slices and len(with_slices) == len(rec["candidates"]) - 1
    values = {(s, v) for c in with_slices.values() for s, vals in c["agreement_slices"].items()
              for v in vals}
    assert {s for s, _ in values} >= {"class", "fp32_class", "length"}
    bars = _bars(html, "qk-bar")
    assert len(bars) == sum(len(vals) for c in with_slices.values()
                            for vals in c["agreement_slices"].values())
    assert len(bars) == len(with_slices) * len(values)
    assert 'id="plot-agreement-slices"' in html and "qk-bin" not in html
    # the bar heights follow the numbers: a candidate with lower agreement has a shorter bar
    fp16 = rec["candidates"]["fp16"]["agreement_slices"]["class"]
    assert all(0.0 <= st["agreement"] <= 1.0 for st in fp16.values())


def test_cosine_histogram_bins_in_an_embedding_report(label_free_world):
    rec, html = _run(label_free_world, "embed", f"model.path={label_free_world['embed']}",
                     *tinyworld.LABEL_FREE, "verdict.metric=cosine",
                     "verdict.max_flip_rate=null")
    with_hist = {n: c for n, c in rec["candidates"].items() if c.get("embedding_fp32")}
    assert len(with_hist) == len(rec["candidates"]) - 1
    bins = _bars(html, "qk-bin")
    per = {n: len(c["embedding_fp32"]["cosine"]["hist"]["counts"]) for n, c in with_hist.items()}
    assert set(per.values()) == {20}
    assert len(bins) == sum(per.values())
    assert sorted(set(bins)) == sorted(with_hist)
    assert 'id="plot-cosine-histogram"' in html


def test_sweep_ranks_lower_is_better_metrics_ascending():
    from quantkit.report.sweep_report import sweep_summary

    def rec(kl, high):
        return bare_record(experiment="x", candidates={"int8.a": candidate(
            metrics={"kl": kl}, verdict=verdict("PASS", "kl", kl, 0.0, high))})
    s = sweep_summary([rec(0.004, 0.006), rec(0.001, 0.002)], labels=["worse", "better"])
    assert [r["label"] for r in s["rows"]] == ["better", "worse"]
