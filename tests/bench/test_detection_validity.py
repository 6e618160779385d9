"""benchmarks/detection_validity.py --smoke: the population bisected to the margin, the
simulated splits through map_signoff, and the last line's format."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import detection_validity as dv  # noqa: E402


def test_smoke_run_prints_the_summary_line(capsys):
    assert dv.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    m = re.search(r"ratio (0\.\d+) \(margin: 0\.99\)", lines[1])
    assert m and abs(float(m.group(1)) - 0.99) <= 1e-4
    assert re.fullmatch(r"false_pass=[0-9.]+ se=[0-9.]+ n_images=150 sims=12", lines[-1])
