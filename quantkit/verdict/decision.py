"""The non-inferiority decision on one metric delta, and the eval size that would decide.

Decision rule (``decide``), with ``m`` the absolute margin and ``[low, high]`` the
two-sided (1 - alpha) paired percentile-bootstrap interval of ``cand - ref``:

* PASS          when ``low > -m``   (the candidate loses less than the margin)
* FAIL          when ``high < -m``  (the candidate loses more than the margin)
* INCONCLUSIVE  otherwise           (the interval contains -m: too few examples)

PASS is a one-sided non-inferiority test at level alpha/2 (H0: delta <= -m), FAIL the
mirror test at alpha/2 (H0: delta >= -m). Using the two-sided (1 - alpha) interval for a
one-sided claim is deliberately conservative: with alpha = 0.05 a candidate whose true
loss equals the margin passes at most ~2.5% of the time (tests/verdict simulate this).

Eval size that would decide (``required_n``), when INCONCLUSIVE: with ``sd`` the
standard deviation of the per-example paired differences (accuracy:
``d_i = correct_cand_i - correct_ref_i``; other metrics: bootstrap SE * sqrt(n)) and the
observed delta, the interval half-width at n examples is about ``z * sd / sqrt(n)``
(``z = z_{1 - alpha/2}``); it excludes -m once that is below ``|delta + m|``::

    n = ceil((z * sd / |delta + m|) ** 2)

If the true effect equals the observed one, an eval of that size decides with about 50%
probability (the expected interval just touches -m); pass ``power`` (e.g. 0.8) to use
``(z + z_power)`` instead of ``z``. The answer is never below the current n + 1 (the
current size did not decide). None when ``|delta + m|`` is ~0 or sd is 0: no eval size
decides at this effect.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.stats import norm

from quantkit.errors import ConfigError, DataError
from quantkit.verdict.margin import Margin, check_alpha, check_n_boot, margin_abs as to_margin_abs
from quantkit.verdict.stats import (
    Interval,
    Metric,
    Seed,
    accuracy_deltas,
    as_rng,
    bootstrap_deltas,
    check_metric,
    check_paired,
    metric_name,
    metric_value,
    percentile_interval,
    z_two_sided,
)

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "Decision",
    "decide",
    "decide_from_correct",
    "decide_from_predictions",
    "required_n",
]

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

#: |delta + margin| at or below this counts as "no effect to decide on".
_TIE = 1e-12


def decide(delta_interval: Interval, margin_abs: float) -> str:
    """PASS if ``low > -margin_abs``; FAIL if ``high < -margin_abs``; else INCONCLUSIVE."""
    if not (isinstance(margin_abs, numbers.Real) and math.isfinite(margin_abs)
            and margin_abs >= 0):
        raise ConfigError("the absolute margin must be a finite number >= 0",
                          where="verdict.margin", value=margin_abs,
                          fix="compute it with margin_abs(Margin(...), ref_metric)")
    if delta_interval.low > -margin_abs:
        return PASS
    if delta_interval.high < -margin_abs:
        return FAIL
    return INCONCLUSIVE


def required_n(*, sd: float, delta: float, margin_abs: float, alpha: float,
               n_current: int | None = None, power: float | None = None) -> int | None:
    """Eval size at which the interval would exclude -margin at the observed effect.

    ``n = ceil(((z_{1-alpha/2} [+ z_power]) * sd / |delta + margin_abs|)^2)``, at least
    ``n_current + 1`` when given; None if ``|delta + margin_abs| <= 1e-12`` or ``sd <= 0``
    (see the module docstring).
    """
    alpha = check_alpha(alpha)
    gap = abs(float(delta) + float(margin_abs))
    if not math.isfinite(sd) or sd <= 0.0 or gap <= _TIE:
        return None
    z = z_two_sided(alpha)
    if power is not None:
        if not 0.0 < power < 1.0:
            raise ConfigError("power must be in (0, 1)", where="verdict.power", value=power,
                              fix="use e.g. 0.8")
        z += float(norm.ppf(power))
    n = math.ceil((z * float(sd) / gap) ** 2)
    if n_current is not None:
        n = max(n, int(n_current) + 1)
    return int(n)


@dataclass(frozen=True)
class Decision:
    """One metric's decision: status, interval, margin and what would decide it."""

    status: str
    metric: str
    interval: Interval
    margin_abs: float
    ref_value: float
    cand_value: float
    sd: float
    n: int
    required_n: int | None

    def __bool__(self) -> bool:
        return self.status == PASS


def _finish(*, metric: str, point: float, deltas: np.ndarray, ref_value: float,
            cand_value: float, sd: float, n: int, margin: Margin, alpha: float) -> Decision:
    interval = percentile_interval(point, deltas, alpha=alpha)
    m = to_margin_abs(margin, ref_value)
    status = decide(interval, m)
    need = (required_n(sd=sd, delta=point, margin_abs=m, alpha=alpha, n_current=n)
            if status == INCONCLUSIVE else None)
    return Decision(status=status, metric=metric, interval=interval, margin_abs=m,
                    ref_value=float(ref_value), cand_value=float(cand_value), sd=float(sd),
                    n=int(n), required_n=need)


def correctness_pair(correct_ref: Any, correct_cand: Any, margin: Any, *, where: str
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Checked per-example correctness of the same examples (1-D bool, equal length) and a
    :class:`Margin`: one clear error otherwise."""
    if not isinstance(margin, Margin):
        raise ConfigError("margin must be a quantkit.verdict.Margin", where="verdict.margin",
                          value=margin, fix="pass Margin('relative', 0.01)")
    r = np.asarray(correct_ref, dtype=bool)
    c = np.asarray(correct_cand, dtype=bool)
    if r.ndim != 1 or r.shape != c.shape or r.size == 0:
        raise DataError("correctness vectors must be non-empty, 1-D and of equal length",
                        where=where, value=(r.shape, c.shape),
                        fix="pass per-example correctness of the same examples")
    return r, c


def decide_from_correct(correct_ref: Any, correct_cand: Any, *, margin: Margin,
                        alpha: float = 0.05, n_boot: int = 2000,
                        seed: Seed = 0) -> Decision:
    """Accuracy decision from per-example correctness; the path ``ab_verdict`` uses.

    The interval is the paired bootstrap of ``mean(correct_cand) - mean(correct_ref)``;
    the margin is taken relative to the reference accuracy when relative.
    """
    alpha = check_alpha(alpha)
    n_boot = check_n_boot(n_boot)
    r, c = correctness_pair(correct_ref, correct_cand, margin, where="decide_from_correct")
    n = r.size
    point, deltas = accuracy_deltas(r, c, n_boot=n_boot, rng=as_rng(seed))
    d = c.astype(np.float64) - r.astype(np.float64)
    sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
    return _finish(metric="accuracy", point=point, deltas=deltas, ref_value=float(r.mean()),
                   cand_value=float(c.mean()), sd=sd, n=n, margin=margin, alpha=alpha)


def decide_from_predictions(y_true: Any, pred_ref: Any, pred_cand: Any, *, margin: Margin,
                            metric: Metric = "accuracy", alpha: float = 0.05,
                            n_boot: int = 2000, seed: Seed = 0,
                            labels: Sequence[Any] | None = None) -> Decision:
    """Decision on any metric; accuracy goes through :func:`decide_from_correct`.

    For other metrics ``sd = bootstrap SE * sqrt(n)`` feeds ``required_n``.
    """
    y, pr, pc = check_paired(y_true, pred_ref, pred_cand, "decide_from_predictions")
    metric = check_metric(metric)
    if metric == "accuracy":
        return decide_from_correct(pr == y, pc == y, margin=margin, alpha=alpha,
                                   n_boot=n_boot, seed=seed)
    alpha = check_alpha(alpha)
    n_boot = check_n_boot(n_boot)
    if labels is None and metric == "macro_f1":
        labels = np.unique(np.concatenate([y, pr, pc])).tolist()
    point, deltas = bootstrap_deltas(y, pr, pc, metric=metric, n_boot=n_boot,
                                     rng=as_rng(seed), labels=labels)
    n = y.size
    sd = float(np.std(deltas, ddof=1)) * math.sqrt(n)
    return _finish(metric=metric_name(metric), point=point, deltas=deltas,
                   ref_value=metric_value(y, pr, metric, labels=labels),
                   cand_value=metric_value(y, pc, metric, labels=labels),
                   sd=sd, n=n, margin=margin, alpha=alpha)
