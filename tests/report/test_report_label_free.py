"""The report of label-free share verdicts (issue 24): the per-example tolerance, the exact
binomial share, the recall@k gallery, and the plot against the declared minimum share."""

from __future__ import annotations

import dataclasses

import numpy as np

from quantkit.report.plots import delta_ci
from quantkit.report.render import render_reports
from quantkit.verdict import TestPolicy, score_signoff


def _share_verdict(seed: int, outside: int) -> dict:
    rec = np.where(np.arange(600) < outside, 0.6, 1.0)
    np.random.default_rng(seed).shuffle(rec)
    t = score_signoff(rec, metric="recall_at_k", threshold=0.9, quantile=0.05,
                      policy=TestPolicy(seed=seed))
    gallery = {"size": 1000, "sha256": "c0ffee" * 10 + "abcd", "source": "train",
               "requested": 1000, "seed": 0}
    t = dataclasses.replace(t, margin={**t.margin, "gallery": gallery})
    return {**t.to_verdict_dict(), "split": "test"}


def test_share_verdicts_render_tolerance_share_and_gallery(record, tmp_path):
    for i, c in enumerate(v for v in record["candidates"].values() if v.get("verdict")):
        c["verdict"] = _share_verdict(i, outside=(5, 30, 60)[i % 3])
    statuses = {c["verdict"]["status"] for c in record["candidates"].values()
                if c.get("verdict")}
    assert "PASS" in statuses and "FAIL" in statuses
    paths = render_reports(record, tmp_path)
    for fmt in ("md", "html"):
        text = paths[fmt].read_text(encoding="utf-8")
        assert "per-example tolerance" in text
        assert "recall_at_k &gt;= 0.9" in text or "recall_at_k >= 0.9" in text
        assert "exact binomial (Clopper-Pearson) bound" in text
        assert "recall@k gallery" in text and "c0ffeec0ffee" in text
        assert "share of examples within the tolerance" in text
    plot = delta_ci(record)
    assert plot is not None and "declared minimum" in plot.title
