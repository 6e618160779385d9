"""The whole protocol in simulation (benchmarks/verdict_validity.py's own functions, few
runs): choices on dev + one declared family on a fresh test split keep the false PASS of the
recommended candidate at alpha; the old one-split protocol does not."""

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from verdict_validity import World, new_protocol, old_protocol  # noqa: E402

from quantkit.verdict import Margin  # noqa: E402


def test_recommended_false_pass_new_vs_old_protocol():
    margin = Margin("relative", 0.01)
    world = World("null", -0.0077)
    rng = np.random.default_rng(2024)
    sims, n = 150, 2500
    new = sum(new_protocol(world, 1500, n, margin, rng)["recommended"] is not None
              for _ in range(sims))
    old = sum(old_protocol(world, n, margin, rng)["recommended"] is not None
              for _ in range(sims))
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / sims)
    assert new / sims <= bound, (new, old)
    assert old / sims > 0.08, (new, old)  # choosing and signing off on one split inflates it
