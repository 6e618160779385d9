"""Assurance: the probability that a test PASSes, averaged over what dev leaves unknown.

The power plan (quantkit/verdict/power.py) asks how large the test split must be for 80%
power *if the true effect were the dev estimate*. When the dev estimate is itself noisy (a
2,500-image half of dev: standard error about 0.28 pp on a 2% flip rate), that power is an
optimistic promise: half the time the true effect is worse than the estimate. Assurance
(O'Hagan, Stevens & Campbell 2005, "Assurance in clinical trial design", Pharmaceutical
Statistics 4:187-201) averages the power over the effect's uncertainty instead. With the dev
estimate ``d`` (standard error ``s_d``), a flat prior and the normal approximation, the test
estimate is ``N(d, s_d^2 + s_t^2)`` before test is seen, with ``s_t = s_d sqrt(n_dev /
n_test)`` (the same per-example variance and design effect), and the test PASSes when its
lower bound ``estimate - z_{1-a} s_t`` clears the threshold:

    assurance = Phi((d - threshold - z_{1-a} s_t) / sqrt(s_d^2 + s_t^2))

For a delta against FP32 (accuracy, macro-F1) ``d`` is ``min(dev delta, 0)`` as in the power
plan: a quantized model is not assumed better than FP32 on test because it was on dev. The
search (quantkit/run/stages/search.py) calls a set powered only when its assurance reaches
``verdict.power`` too; the sign-off's own power plan is unchanged.
"""

from __future__ import annotations

import math

from scipy.stats import norm

from quantkit.verdict.margin import DELTA_METRICS

__all__ = ["assurance"]


def assurance(*, metric: str, point: float, low: float, high: float, level_alpha: float,
              threshold: float, n_dev: int, n_test: int, test_alpha: float) -> float:
    """The probability that a one-sided test at ``test_alpha`` on ``n_test`` examples finds
    the candidate above ``threshold``, given its dev estimate ``point`` with the two-sided
    ``1 - 2 level_alpha`` interval ``[low, high]`` on ``n_dev`` examples (module doc)."""
    d = min(point, 0.0) if metric in DELTA_METRICS else point
    if n_dev <= 0 or n_test <= 0:
        return 0.0
    s_dev = max(high - low, 0.0) / (2.0 * float(norm.ppf(1.0 - level_alpha)))
    s_test = s_dev * math.sqrt(n_dev / n_test)
    lead = d - threshold - float(norm.ppf(1.0 - test_alpha)) * s_test
    spread = math.hypot(s_dev, s_test)
    if spread == 0.0:
        return 1.0 if lead > 0.0 else 0.0
    return float(norm.cdf(lead / spread))
