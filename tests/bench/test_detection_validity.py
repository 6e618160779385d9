"""benchmarks/detection_validity.py --smoke: the population bisected to the margin, the
simulated splits through map_signoff, and the last line's format; the bias study, the second
population (the results file: tests/bench/test_benchmark_smoke.py)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import detection_validity as dv  # noqa: E402


def test_smoke_run_prints_the_summary_line(capsys):
    assert dv.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    m = re.search(r"ratio (0\.\d+) \(margin: 0\.99\)", lines[0])
    assert m and abs(float(m.group(1)) - 0.99) <= 1e-4
    assert re.fullmatch(r"false_pass=[0-9.]+ se=[0-9.]+ n_images=150 sims=12", lines[-1])


@pytest.fixture(scope="module")
def small_margin():
    labels, dets, noise, ch = dv.population(400, 0, "base")
    s, ref, cand, ratio = dv.at_margin(labels, dets, noise, ch.score_step)
    return ref.table, cand.table, ratio


def test_bias_study_reports_each_estimand_and_the_bootstrap(small_margin):
    ref, cand, ratio = small_margin
    assert abs(ratio - 0.99) <= 1e-4
    lines = dv.bias_study(ref, cand, splits=20, boot_splits=2, n_boot=30, seed=0,
                          sizes=(100, 200))
    assert lines[0].startswith("bias of D")
    rows = [ln for ln in lines if ln.strip().startswith("n=")]
    assert len(rows) == 3 and "without replacement" in rows[-1]
    for ln in rows:
        assert "101-point" in ln and "area" in ln and "recall-0 term" in ln
    assert "the bootstrap at n=200" in lines[-1]


def test_sparse_population_has_more_classes_and_tied_candidate_scores():
    labels, dets, noise, ch = dv.population(60, 1, "sparse")
    assert ch.n_classes == 16 and len(labels.class_names) == 16
    cand = dv.degrade(dets, noise, 0.1, ch.score_step)
    scores = np.concatenate([d.scores for d in cand])
    on_grid = np.isclose(scores * 256, np.round(scores * 256)) | (scores == 1e-4)
    assert on_grid.all()
