"""Power planned, not chased: the test size a paired non-inferiority sign-off needs.

Before the test split is touched, dev gives the flip rate ``f`` (discordant proportion,
``(b + c) / n``) and the delta of each declared candidate. Under the alternative that the
true delta is ``delta`` the cells are ``p_b = (f - delta) / 2`` and ``p_c = (f + delta) / 2``
and a paired difference has variance ``V1 = f - delta^2``; under the null ``delta0 = -m``
the score test (Tango, ``quantkit.verdict.score``) uses ``V0 = 2 p_b~ + delta0 (1 - delta0)``
with ``p_b~`` the restricted estimate at the expected counts. The one-sided level-alpha
test has power ``1 - beta`` at (Nam 1997, Stat Med 16:187-198)::

    n = deff * ((z_{1-alpha} sqrt(V0) + z_{1-beta} sqrt(V1)) / (delta + m))^2

``deff`` is the design effect of grouped data (``quantkit.verdict.cluster``). The planned
delta is ``min(dev delta, 0)``: a candidate chosen on dev looks better there than it is
(the winner's curse), so a plan never counts on the candidate beating FP32. No size gives
power when ``delta <= -m``. The same formula gives, for an INCONCLUSIVE on test, the size a
*new declared plan* (a fresh or grown test split, linked from the record) would need; it is
an 80%-power figure, not the even-odds size at the observed delta.

For a continuous per-example score (cosine, recall@k, KL, |logit delta|) with dev mean
``mu``, spread ``sd`` and bound ``b``: ``n = deff ((z_{1-alpha} + z_{1-beta}) sd / |mu - b|)^2``
(:func:`required_score_size`).

For the label-free agreement test against a minimum ``a0`` (one proportion, Wilson score
test) with planned agreement ``a > a0``::

    n = deff * ((z_{1-alpha} sqrt(a0 (1 - a0)) + z_{1-beta} sqrt(a (1 - a))) / (a - a0))^2
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scipy.stats import norm

from quantkit.errors import ConfigError

__all__ = ["PowerPlan", "required_agreement_size", "required_bootstrap_size",
           "required_score_size", "required_test_size"]


def _check(alpha: float, power: float, design_effect: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise ConfigError("the one-sided alpha must be in (0, 0.5)", where="verdict.alpha",
                          value=alpha, fix="use 0.025 (one-sided), i.e. verdict.alpha=0.05")
    if not 0.0 < power < 1.0:
        raise ConfigError("power must be in (0, 1)", where="verdict.power", value=power,
                          fix="set verdict.power=0.8")
    if not (math.isfinite(design_effect) and design_effect >= 1.0):
        raise ConfigError("the design effect must be a finite number >= 1",
                          where="verdict.power", value=design_effect,
                          fix="pass GroupStats.design_effect (1 without groups)")


def required_test_size(*, flip_rate: float, delta: float, margin_abs: float, alpha: float = 0.025,
                       power: float = 0.8, design_effect: float = 1.0,
                       min_n: int = 1) -> int | None:
    """Paired examples for ``power`` at one-sided ``alpha`` (module docstring); None if none."""
    _check(alpha, power, design_effect)
    f, dl, m = float(flip_rate), float(delta), float(margin_abs)
    if not (0.0 <= f <= 1.0) or abs(dl) > f + 1e-12 or m < 0:
        raise ConfigError("need 0 <= flip rate <= 1, |delta| <= flip rate and margin >= 0",
                          where="verdict.power", value=(f, dl, m),
                          fix="pass dev's discordant proportion and delta")
    gap = dl + m
    if gap <= 1e-12:
        return None
    d0 = -m
    p_b = max((f - dl) / 2.0, 0.0)
    p_c = max((f + dl) / 2.0, 0.0)
    big_b = -(p_b + p_c) + (2.0 - p_c + p_b) * d0
    big_c = -p_b * d0 * (1.0 - d0)
    p_tilde = (math.sqrt(max(big_b * big_b - 8.0 * big_c, 0.0)) - big_b) / 4.0
    v0 = max(2.0 * p_tilde + d0 * (1.0 - d0), 0.0)
    v1 = max(f - dl * dl, 0.0)
    za, zb = float(norm.ppf(1.0 - alpha)), float(norm.ppf(power))
    n = design_effect * ((za * math.sqrt(v0) + zb * math.sqrt(v1)) / gap) ** 2
    return int(max(math.ceil(n), int(min_n)))


def required_agreement_size(*, agreement: float, min_agreement: float, alpha: float = 0.025,
                            power: float = 0.8, design_effect: float = 1.0,
                            min_n: int = 1) -> int | None:
    """Examples for ``power`` to show agreement > ``min_agreement``; None if ``a <= a0``."""
    _check(alpha, power, design_effect)
    a, a0 = float(agreement), float(min_agreement)
    if not 0.0 < a0 < 1.0:
        raise ConfigError("the minimum agreement must be in (0, 1)",
                          where="verdict.min_agreement", value=a0, fix="e.g. 0.99")
    if a - a0 <= 1e-12:
        return None
    za, zb = float(norm.ppf(1.0 - alpha)), float(norm.ppf(power))
    n = design_effect * ((za * math.sqrt(a0 * (1 - a0)) + zb * math.sqrt(a * (1 - a)))
                         / (a - a0)) ** 2
    return int(max(math.ceil(n), int(min_n)))


def required_score_size(*, mean: float, threshold: float, sd: float,
                        higher_is_better: bool = True, alpha: float = 0.025,
                        power: float = 0.8, design_effect: float = 1.0,
                        min_n: int = 1) -> int | None:
    """Examples for ``power`` to show a continuous per-example score's mean beyond a floor
    (``higher_is_better``) or ceiling: ``n = deff ((z_{1-alpha} + z_{1-beta}) sd / gap)^2``
    with ``gap`` the planned distance to the bound; None when the mean is not beyond it."""
    _check(alpha, power, design_effect)
    gap = (mean - threshold) if higher_is_better else (threshold - mean)
    if not (math.isfinite(gap) and math.isfinite(sd)) or sd < 0:
        raise ConfigError("the planned score and its spread must be finite", where="verdict.power",
                          value=(mean, sd), fix="plan from a dev test of the same metric")
    if gap <= 1e-12:
        return None
    za, zb = float(norm.ppf(1.0 - alpha)), float(norm.ppf(power))
    n = design_effect * ((za + zb) * sd / gap) ** 2
    return int(max(math.ceil(n), int(min_n), 2))


@dataclass(frozen=True)
class PowerPlan:
    """One candidate's planned test size, decided from dev before test is evaluated.

    ``n_required`` None means no test size gives the power at the planned effect.
    ``adequate``: ``n_available >= n_required`` (None when ``n_available`` is unknown).
    """

    candidate: str
    basis: str  # "dev" (a plan) or "test" (what a new declared plan would need)
    n_required: int | None
    n_available: int | None
    power: float
    alpha: float
    metric: str
    planned_effect: float  # delta (accuracy) or agreement the plan assumes
    margin: float  # margin_abs (accuracy) or the minimum agreement
    flip_rate: float
    design_effect: float
    reason: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def adequate(self) -> bool | None:
        if self.n_available is None:
            return None
        return self.n_required is not None and self.n_available >= self.n_required

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "basis": self.basis, "n_required": self.n_required,
                "n_available": self.n_available, "adequate": self.adequate,
                "power": self.power, "alpha_one_sided": self.alpha, "metric": self.metric,
                "planned_effect": self.planned_effect, "margin": self.margin,
                "flip_rate": self.flip_rate, "design_effect": self.design_effect,
                "reason": self.reason, **self.extra}


def required_bootstrap_size(*, sd: float, n: int, effect: float, margin_abs: float,
                            alpha: float = 0.025, power: float = 0.8, min_n: int = 1
                            ) -> int | None:
    """Units (images, or groups) a paired bootstrap test of ``D`` needs for ``power`` at
    ``effect`` (the delta assumed), from the bootstrap spread ``sd`` of ``D`` at ``n`` units
    scaled as ``1 / sqrt(n)``: ``n' = n ((z_a + z_power) sd / (effect + margin))^2`` (a
    detector's mAP; quantkit/verdict/map_bootstrap.py). None when ``effect`` is at or beyond
    ``-margin_abs``."""
    _check(alpha, power, 1.0)
    gap = effect + margin_abs
    if gap <= 0:
        return None
    if sd <= 0 or not math.isfinite(sd):
        return max(int(min_n), 1)
    z = float(norm.ppf(1 - alpha) + norm.ppf(power))
    return max(int(min_n), int(math.ceil(n * (z * sd / gap) ** 2)))
