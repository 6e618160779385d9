"""How every test of :mod:`quantkit.verdict` is run: one frozen :class:`TestPolicy`.

The knobs a statistical test takes beyond its data and its declared bound (one-sided
``alpha``, bootstrap resamples and seed, the minimum examples and groups below which a
verdict is INCONCLUSIVE, the planned power, the power plan's ``min_power`` and simulations)
travel together as one value, checked once where it is made: from the run's settings by
:meth:`TestPolicy.from_settings` (``settings.verdict`` and ``settings.seed``), or by hand
in tests and benchmarks. A test that runs at another level (the look's alpha, a Holm step)
takes :meth:`TestPolicy.at`; a test that overrides a knob on purpose (the churn interval
has no minimum size) says so with :func:`dataclasses.replace`.

Numerics only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from quantkit.errors import ConfigError
from quantkit.verdict.margin import check_n_boot
from quantkit.verdict.paired import Seed

__all__ = ["MIN_GROUPS", "MIN_N", "POWER_SIMS", "TestPolicy", "check_alpha_one_sided",
           "check_count"]

#: Below this many examples a verdict is INCONCLUSIVE (verdict.min_n).
MIN_N = 100
#: With groups, below this many groups a verdict is INCONCLUSIVE (verdict.min_groups).
#: With few groups a split often draws none of the groups that carry a loss and looks
#: lossless, which no interval can see. 75 is the smallest number of groups from which every
#: world simulated with the sign-off's own tests (the loss exactly the margin, all of it in
#: 10% of the groups; accuracy and the label-free share test) keeps the false-PASS rate
#: within alpha + 2 SE (benchmarks/group_validity.py; measured:
#: benchmarks/results/group_validity.md). A loss concentrated in fewer groups needs more:
#: what 75 covers is a loss that the split's groups carry in numbers (7.5 on average at 10%
#: of 75); a loss in a few groups of the population (3 to 6 of 75 to 100 on average) passes
#: falsely up to about twice alpha, and no interval can stop that: a split that drew none of
#: those groups is drawn exactly as a lossless one. The small-sample cluster corrections
#: (CR2 / Bell-McCaffrey t, the wild cluster bootstrap) pass those worlds at least as often
#: as the bootstrap-t (``group_validity.py --few``, same results file).
MIN_GROUPS = 75
#: Simulated test splits per planned power (verdict.power_sims; quantkit/verdict/rule_power.py).
POWER_SIMS = 400


def check_alpha_one_sided(alpha: Any) -> float:
    """A one-sided alpha in (0, 0.5) as float; ConfigError naming verdict.alpha otherwise."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) \
            or not 0.0 < float(alpha) < 0.5:
        raise ConfigError("the one-sided alpha must be in (0, 0.5)", where="verdict.alpha",
                          value=alpha, fix="use 0.025 one-sided (verdict.alpha=0.05 two-sided)")
    return float(alpha)


def check_count(name: str, value: Any, minimum: int) -> int:
    """``verdict.<name>`` as an int >= ``minimum``; ConfigError naming the key otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}", where=f"verdict.{name}",
                          value=value, fix=f"set e.g. verdict.{name}={max(minimum, 100)}")
    return int(value)


@dataclass(frozen=True)
class TestPolicy:
    """The knobs of every verdict test, checked once.

    ``alpha``: one-sided level (the reported intervals are two-sided ``1 - 2 alpha``);
    ``n_boot`` / ``seed``: bootstrap resamples and their seed (an int, or a Generator that
    a simulation shares across its tests); ``min_n`` / ``min_groups``: below these a verdict
    is INCONCLUSIVE whatever the interval; ``power``: what an INCONCLUSIVE's ``plan_n`` and
    the power plans are sized for; ``min_power``: a family member planned below it is not
    tested (None: every member is); ``sims``: simulated test splits per planned power (0:
    the analytic approximation).
    """

    __test__ = False  # not a pytest test class

    alpha: float = 0.025
    n_boot: int = 2000
    seed: Seed = 0
    min_n: int = MIN_N
    min_groups: int = MIN_GROUPS
    power: float = 0.8
    min_power: float | None = None
    sims: int = POWER_SIMS

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", check_alpha_one_sided(self.alpha))
        object.__setattr__(self, "n_boot", check_n_boot(self.n_boot))
        object.__setattr__(self, "min_n", check_count("min_n", self.min_n, 1))
        object.__setattr__(self, "min_groups", check_count("min_groups", self.min_groups, 2))

    @classmethod
    def from_settings(cls, settings: Any) -> "TestPolicy":
        """The run's policy: ``settings.verdict`` (one-sided alpha = ``verdict.alpha / 2``)
        and ``settings.seed``."""
        v = settings.verdict
        return cls(alpha=v.alpha / 2, n_boot=v.n_boot, seed=settings.seed, min_n=v.min_n,
                   min_groups=v.min_groups, power=v.power, min_power=v.min_power,
                   sims=v.power_sims)

    def at(self, alpha: float) -> "TestPolicy":
        """The same policy at another one-sided level (a look's alpha, a Holm step)."""
        return self if alpha == self.alpha else replace(self, alpha=alpha)
