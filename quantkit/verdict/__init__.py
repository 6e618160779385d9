"""quantkit.verdict: paired statistics and the PASS | FAIL | INCONCLUSIVE verdict.

Pure numpy/scipy; randomness only from the ``seed`` passed in. Decision rules are
documented in ``quantkit.verdict.decision`` (aggregate) and ``quantkit.verdict.ab``
(slices, final status).
"""

from __future__ import annotations

from quantkit.verdict.ab import SKIPPED, Verdict, ab_verdict
from quantkit.verdict.decision import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Decision,
    decide,
    decide_from_correct,
    decide_from_predictions,
    required_n,
)
from quantkit.verdict.margin import Margin, check_alpha, check_n_boot, margin_abs
from quantkit.verdict.stats import (
    Interval,
    holm_adjust,
    mcnemar_exact,
    mcnemar_table,
    paired_bootstrap_delta,
)

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "SKIPPED",
    "Decision",
    "Interval",
    "Margin",
    "Verdict",
    "ab_verdict",
    "check_alpha",
    "check_n_boot",
    "decide",
    "decide_from_correct",
    "decide_from_predictions",
    "holm_adjust",
    "margin_abs",
    "mcnemar_exact",
    "mcnemar_table",
    "paired_bootstrap_delta",
    "required_n",
]
