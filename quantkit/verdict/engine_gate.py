"""The engine check: one bound for the deployed artifact, and the gate that earns it.

The sign-off measures a candidate on the execution its numbers come from (the exact Q/DQ
emulation of the plan for ``target=tensorrt``); what ships is the artifact as the
deployment runtime runs it (a TensorRT engine). The declared budget ``D`` (the margin, or
the distance between the declared floor / ceiling and a perfect score) is therefore split
before any evaluation: the sign-off decides with what is left, the engine check must show
the engine within its tolerance ``t`` of the emulation, and together they bound the
deployed artifact by ``D`` (:func:`split_budget`). How the two parts add up depends on the
metric:

* accuracy, top-1 agreement: an example whose top-1 prediction does not flip between
  emulation and engine keeps its correctness and its agreement with FP32, so the two
  executions differ by at most the flip rate ``f``: deployed delta >= signed delta - f
  (exact). ``t = share * D``, the sign-off decides at ``D - t``.
* macro-F1: macro-F1 differences add (deployed - FP32 = (deployed - emulation) + (emulation
  - FP32), exact), so the gate bounds the engine's macro-F1 loss vs the emulation in
  macro-F1 units with the sign-off's own macro-F1 test (:func:`macro_f1_gate`; a flip
  count does not bound it: a flip of a rare class's example moves macro-F1 by more than
  1/n). ``t = share * D``.
* the label-free shares (cosine, recall@k, KL, mean |logit delta|): the sign-off shows that
  at most a share ``q`` of the examples is outside a per-example bound ``D``. Per example
  the deficits compose (below), so an example is within ``D`` deployed when it is within
  the sign-off's bound signed and within ``t`` on the engine; the two shares outside add
  (union bound), so ``q`` is split as the budget is: the sign-off tests ``(1 - share) q``
  at its bound, the engine gate ``share * q`` at ``t`` (:func:`split_quantile`,
  :func:`share_gate`), and the deployed share outside ``D`` is at most ``q`` (exact for
  cosine, recall@k and |logit delta|; second order for KL). Per example:
  abs_logit: |ref - engine| <= |ref - emulation| + |emulation - engine| (triangle
  inequality), ``t = share * D``; recall@k: with R, M, E the k-neighbour sets of FP32,
  emulation and engine of one query in the sign-off's fixed gallery,
  |R & E| >= |R & M| + |M & E| - k, so the recall deficits add, ``t = share * D``;
  cosine: ``1 - cos = |u - v|^2 / 2`` for unit vectors and the chord |u - v| is a metric,
  so the root deficits add, ``t = share^2 * D``, the sign-off at ``(1 - share)^2 * D``;
  KL: not a metric, but to second order KL(p || q) = (1/2) d_F(p, q)^2 with the
  Fisher-Rao distance d_F (Kullback 1959, ch. 2.6; Amari & Nagaoka 2000, sec. 3.5), so
  the same root split holds for small divergences.

The gates PASS only when the engine is shown within its tolerance of the emulation at the
policy's alpha: an exact Clopper-Pearson bound on the flip count (Clopper & Pearson 1934)
for flips (:func:`flip_gate`); the sign-off's macro-F1 test for macro-F1; the sign-off's
exact share test (:func:`quantkit.verdict.score_signoff`) for the label-free shares. A
candidate may be recommended only when the gate PASSes (not merely "did not FAIL") where
the deployment runtime is the one checked; then a deployed loss beyond ``D`` needs the
sign-off or the gate to pass a false statement, each at most alpha. The recommendation
takes any family member whose gate passed, so each member's gate runs at alpha over the
family's size (Bonferroni; ``run/stages/backend_check.py`` ``gate_alpha``).

Size (:func:`faithful_power`, :func:`faithful_size`): a faithful engine, one whose flips
(or share of examples outside ``t``) are a quarter of what the gate allows, must pass with
power >= 0.8; the exact binomial power gives the compared examples that needs, the stage
records it and the power of the size it had, and says what to grow when it falls short
(macro-F1: planned as its flip count, approximate). Simulated through the run's own path
(``benchmarks/verdict_validity.py`` rows ``engine*``: gate -> BackendCheck ->
blocked_by_engine -> recommend_signed; measured: benchmarks/results/verdict_validity.md).

Both gates take the sign-off's :class:`~quantkit.verdict.policy.TestPolicy` (its alpha;
the score gate also its ``n_boot``, seed and ``min_n``).

Pure: numpy / scipy, randomness only from the policy's seed; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import beta, binom

from quantkit.errors import ConfigError
from quantkit.verdict.macro_f1 import macro_f1_signoff
from quantkit.verdict.margin import Margin
from quantkit.verdict.outcome import FAIL as S_FAIL
from quantkit.verdict.outcome import PASS as S_PASS
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.share_tests import score_signoff

__all__ = ["DeploymentBudget", "EngineCheckPlan", "EngineGate", "FLIP_METRICS", "GATE_UNITS",
           "ROOT_METRICS", "SHARE_METRICS", "engine_deficits", "faithful_power", "faithful_size",
           "flip_bounds", "flip_gate", "macro_f1_gate", "score_gate", "split_budget",
           "split_quantile", "check_size"]

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"

#: metrics whose engine gate counts top-1 flips between emulation and engine
FLIP_METRICS = ("accuracy", "agreement")
#: label-free metrics signed off as a share of examples within a per-example bound
SHARE_METRICS = ("cosine", "recall_at_k", "kl", "abs_logit")
#: metrics whose budget splits on the square root (cosine exact, KL to second order)
ROOT_METRICS = ("cosine", "kl")
#: a faithful engine: its flips (or share outside the tolerance) are this part of the limit
FAITHFUL = 0.25
#: the power a faithful engine must have to pass
FAITHFUL_POWER = 0.8
#: what the gate measures, per decision metric (engine vs the emulation)
GATE_UNITS = {"accuracy": "top-1 flip rate", "macro_f1": "macro-F1 loss",
              "agreement": "top-1 flip rate",
              "abs_logit": "share of examples with mean |logit delta| above the tolerance",
              "kl": "share of examples with KL(emulation || engine) above the tolerance",
              "cosine": "share of examples with 1 - cosine above the tolerance",
              "recall_at_k": "share of queries with 1 - recall@k (fixed gallery) above the "
                             "tolerance",
              "map": "mAP@[.5:.95] deficit", "map50": "mAP@.5 deficit",
              "map75": "mAP@.75 deficit"}
_SHARES = ("; the share of examples outside: the sign-off's (1 - share) q and the engine's "
           "share * q add (union bound)")
_COMPOSITION = {
    "accuracy": "exact: a non-flipped example keeps its correctness",
    "macro_f1": "exact: macro-F1 differences add; the gate bounds the engine's in macro-F1",
    "agreement": "exact: a non-flipped example keeps its agreement with FP32",
    "abs_logit": "exact: triangle inequality of |logit delta| per example" + _SHARES,
    "recall_at_k": "exact: the k-neighbour set deficits in one gallery add per query" + _SHARES,
    "cosine": "exact: chord distances add (Minkowski), the bound splits on the root" + _SHARES,
    "kl": "second order: KL = d_Fisher^2 / 2, the bound splits on the root" + _SHARES,
    **{m: "approximate: mAP is not a sum over images; the deficits add to first order"
       for m in ("map", "map50", "map75")}}


@dataclass(frozen=True)
class EngineCheckPlan:
    """``required``: an engine check is part of the deployed artifact's bound (the sign-off
    decides with ``1 - share`` of the budget); ``runs_here``: this run executes the
    deployment runtime, so the check runs and gates the recommendation; ``how_to_run``: what
    to run, where, when it does not."""

    required: bool
    runs_here: bool
    deployment: str
    compared: str
    how_to_run: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DeploymentBudget:
    """The declared budget ``declared`` (in the metric's deficit units: the margin, or
    1 - floor, or the ceiling) split into what the sign-off decides at (``signoff``) and the
    engine's tolerance vs the emulation (``tolerance``, in :data:`GATE_UNITS`); for the
    label-free shares the share of examples allowed outside is split the same way
    (:func:`split_quantile`, stated in ``composition``)."""

    metric: str
    share: float
    declared: float
    signoff: float
    tolerance: float
    units: str
    composition: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_quantile(quantile: float, share: float) -> tuple[float, float]:
    """The share of examples allowed outside the per-example bound (``verdict.score_quantile``)
    split into the sign-off's ``(1 - share) q`` and the engine gate's ``share * q``: the two
    add to ``q`` (union bound; module docstring)."""
    engine = float(share) * float(quantile)
    return float(quantile) - engine, engine


def split_budget(metric: str, declared: float, share: float,
                 quantile: float | None = None) -> DeploymentBudget:
    """Split ``declared`` (> 0) for ``metric`` by ``share`` in [0, 1) (0: no engine check
    stands between the signed numbers and the deployment; the sign-off keeps everything);
    ``quantile``: the declared share of examples allowed outside (label-free shares), whose
    split the composition states."""
    if metric not in GATE_UNITS:
        raise ConfigError("no engine gate for this metric", where="verdict.metric", value=metric,
                          fix=f"use one of {sorted(GATE_UNITS)}")
    if not (isinstance(declared, (int, float)) and math.isfinite(declared) and declared > 0):
        raise ConfigError("the declared budget must be a positive number",
                          where=f"split_budget({metric})", value=declared,
                          fix="pass the margin, 1 - the floor, or the ceiling")
    if not (isinstance(share, (int, float)) and 0.0 <= share < 1.0):
        raise ConfigError("the engine's share of the budget must be in [0, 1)",
                          where="compare.numerics_margin_share", value=share,
                          fix="e.g. compare.numerics_margin_share=0.5")
    if metric in ROOT_METRICS:
        tol, left = share ** 2 * declared, (1.0 - share) ** 2 * declared
    else:
        tol, left = share * declared, (1.0 - share) * declared
    composition = _COMPOSITION[metric]
    if quantile is not None and metric in SHARE_METRICS:
        q_s, q_e = split_quantile(quantile, share)
        composition += f" (declared q {quantile:g}: sign-off {q_s:.4g}, engine {q_e:.4g})"
    return DeploymentBudget(metric=metric, share=float(share), declared=float(declared),
                            signoff=float(left), tolerance=float(tol), units=GATE_UNITS[metric],
                            composition=composition)


@dataclass(frozen=True)
class EngineGate:
    """The gate's decision: ``status`` pass | fail | inconclusive on the engine's deficit vs
    the emulation (``units``) against ``tolerance``; ``passed`` only on pass."""

    status: str
    metric: str
    units: str
    n: int
    observed: float
    lower: float
    upper: float
    tolerance: float
    alpha: float
    n_needed: int | None
    reasons: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def flip_bounds(flips: int, n: int, *, alpha: float) -> tuple[float, float]:
    """Exact one-sided (1 - alpha) Clopper-Pearson lower and upper bounds of flips / n."""
    lo = 0.0 if flips == 0 else float(beta.ppf(alpha, flips, n - flips + 1))
    hi = 1.0 if flips == n else float(beta.ppf(1 - alpha, flips + 1, n - flips))
    return lo, hi


def _passing_counts(n: np.ndarray, limit: float, alpha: float) -> np.ndarray:
    """The largest count x at each size n whose exact upper bound is within ``limit``
    (P(X <= x | limit) <= alpha), -1 where none is."""
    x = binom.ppf(alpha, n, limit)  # smallest x with cdf >= alpha
    x = np.where(binom.cdf(x, n, limit) > alpha, x - 1, x)
    return x.astype(np.int64)


def faithful_power(n: int, limit: float, *, alpha: float) -> float:
    """The probability that a faithful engine (rate ``FAITHFUL * limit``) passes the exact
    binomial gate at ``limit`` with ``n`` compared examples."""
    if n <= 0 or not 0.0 < limit < 1.0:
        return 0.0
    x = int(_passing_counts(np.array([n]), limit, alpha)[0])
    return float(binom.cdf(x, n, FAITHFUL * limit)) if x >= 0 else 0.0


def check_size(limit: float, available: int, *, alpha: float) -> int:
    """How many of ``available`` examples the exact binomial gate at ``limit`` compares: the
    size with the highest faithful power (the power is a saw in n, so the last examples can
    lower it), the largest of ties. Depends on the settings and the split's size only,
    never on outputs, so the gate keeps its level."""
    if available <= 1 or not 0.0 < limit < 1.0:
        return int(max(available, 0))
    sizes = np.arange(1, int(available) + 1)
    x = _passing_counts(sizes, limit, alpha)
    power = np.where(x >= 0, binom.cdf(np.maximum(x, 0), sizes, FAITHFUL * limit), 0.0)
    best = np.flatnonzero(power >= power.max() - 1e-12)
    return int(sizes[best[-1]])


def faithful_size(limit: float, *, alpha: float, power: float = FAITHFUL_POWER) -> int:
    """The fewest compared examples at which a faithful engine passes the gate at ``limit``
    with at least ``power`` (exact binomial; the first such size)."""
    if not 0.0 < limit < 1.0:
        raise ConfigError("the engine tolerance must be a rate in (0, 1)", where="faithful_size",
                          value=limit, fix="set compare.numerics_margin_share in (0, 1)")
    hi = 64
    while True:
        sizes = np.arange(max(1, hi // 2), hi + 1)
        x = _passing_counts(sizes, limit, alpha)
        ok = (x >= 0) & (binom.cdf(np.maximum(x, 0), sizes, FAITHFUL * limit) >= power)
        if ok.any():
            return int(sizes[int(np.argmax(ok))])
        hi *= 2
        if hi > 10 ** 8:
            raise ConfigError("no size gives the engine check its power at this tolerance",
                              where="faithful_size", value=limit,
                              fix="raise compare.numerics_margin_share")


def _flips_needed(rate: float, tolerance: float, alpha: float, n: int) -> int | None:
    """Smallest n' >= n at which the observed ``rate`` would pass; None when it cannot."""
    if rate >= tolerance:
        return None
    hi = max(n, 1)
    while flip_bounds(round(rate * hi), hi, alpha=alpha)[1] > tolerance:
        hi *= 2
        if hi > 10 ** 9:
            return None
    lo = hi // 2 if hi > n else n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if flip_bounds(round(rate * mid), mid, alpha=alpha)[1] > tolerance:
            lo = mid
        else:
            hi = mid
    return hi


def _check(n: int, tolerance: float, where: str) -> None:
    if not (isinstance(n, (int, np.integer)) and n > 0):
        raise ConfigError("the engine check needs at least one compared example", where=where,
                          value=n, fix="set compare.backend_check_subset > 0")
    if not (math.isfinite(tolerance) and tolerance > 0):
        raise ConfigError("the engine tolerance must be positive", where=where, value=tolerance,
                          fix="set compare.numerics_margin_share in (0, 1)")


def flip_gate(flips: int, n: int, *, tolerance: float, policy: TestPolicy = TestPolicy(),
              metric: str = "accuracy", what: str = "engine vs emulation") -> EngineGate:
    """Gate ``flips`` top-1 flips among ``n`` compared examples at ``tolerance`` (a flip
    rate): pass when the exact upper bound is within it, fail when the lower bound is above
    it, else inconclusive (with the size that would decide at the observed rate)."""
    alpha = policy.alpha
    _check(n, tolerance, "flip_gate")
    if not (isinstance(flips, (int, np.integer)) and 0 <= flips <= n):
        raise ConfigError("flips must be a count in [0, n]", where="flip_gate", value=flips,
                          fix="count the examples whose top-1 prediction differs")
    lo, hi = flip_bounds(int(flips), int(n), alpha=alpha)
    rate = flips / n
    head = (f"{what}: {flips} of {n} top-1 predictions flip ({rate:.4f}; one-sided "
            f"{1 - alpha:.1%} bounds [{lo:.4f}, {hi:.4f}]) against the tolerance {tolerance:.4f}")
    if hi <= tolerance:
        status, why = PASS, "within it"
    elif lo > tolerance:
        status, why = FAIL, "above it"
    else:
        status, why = INCONCLUSIVE, "too few compared examples to show it within"
    needed = _flips_needed(rate, tolerance, alpha, int(n)) if status == INCONCLUSIVE else None
    reasons = [f"{head}: {why}"]
    if needed is not None:
        reasons.append(f"{needed} compared examples would decide at the observed rate")
    return EngineGate(status=status, metric=metric, units=GATE_UNITS.get(metric, "flip rate"),
                      n=int(n), observed=float(rate), lower=lo, upper=hi,
                      tolerance=float(tolerance), alpha=float(alpha), n_needed=needed,
                      reasons=tuple(reasons))


def _status(sign_status: str) -> str:
    return PASS if sign_status == S_PASS else FAIL if sign_status == S_FAIL else INCONCLUSIVE


_WHY = {PASS: "within it", FAIL: "above it", INCONCLUSIVE: "the interval does not decide"}


def _from_signoff(t, status: str, metric: str, *, observed: float,
                  bounds: tuple[float, float], limit: float, alpha: float,
                  reasons: list[str]) -> EngineGate:
    """The gate from the sign-off test ``t`` it ran (its ``plan_n``: the size that would
    decide an inconclusive gate)."""
    needed = t.plan_n if status == INCONCLUSIVE else None
    if needed:
        reasons.append(f"about {int(needed)} compared examples would decide")
    return EngineGate(status=status, metric=metric, units=GATE_UNITS[metric], n=int(t.n),
                      observed=float(observed), lower=float(bounds[0]),
                      upper=float(bounds[1]), tolerance=float(limit), alpha=float(alpha),
                      n_needed=int(needed) if needed else None, reasons=tuple(reasons))


def macro_f1_gate(labels: Any, emulated: Any, deployed: Any, *, n_classes: int,
                  tolerance: float, policy: TestPolicy = TestPolicy(), groups: Any = None,
                  what: str = "engine vs emulation") -> EngineGate:
    """Gate the engine's macro-F1 loss vs the emulation (top-1 predictions ``emulated`` /
    ``deployed`` of labelled examples) at ``tolerance`` (macro-F1 units) with the sign-off's
    own macro-F1 test (:func:`quantkit.verdict.macro_f1.macro_f1_signoff`, the emulation as
    its reference, an absolute margin)."""
    y = np.asarray(labels)
    _check(int(y.size), tolerance, "macro_f1_gate")
    t = macro_f1_signoff(y, emulated, deployed, n_classes=n_classes,
                         margin=Margin("absolute", float(tolerance)), groups=groups,
                         policy=replace(policy, power=FAITHFUL_POWER), candidate="engine")
    status = _status(t.status)
    loss = float(t.ref_value) - float(t.cand_value)
    lo, hi = -float(t.high), -float(t.low)  # bounds of the delta -> bounds of the loss
    reasons = [f"{what}: macro-F1 {float(t.cand_value):.4f} vs {float(t.ref_value):.4f} "
               f"(loss {loss:+.4f}, bounds [{lo:+.4f}, {hi:+.4f}]) over {y.size} labelled "
               f"examples against the tolerance {tolerance:.4f}: {_WHY[status]}"]
    return _from_signoff(t, status, "macro_f1", observed=loss, bounds=(lo, hi),
                         limit=tolerance, alpha=policy.alpha, reasons=reasons)


def engine_deficits(metric: str, scores: Any) -> np.ndarray:
    """Per-example deficit of the engine vs the emulation from the per-example score
    (cosine, recall@k, agreement: 1 - score; kl, abs_logit: the score)."""
    v = np.asarray(scores, dtype=np.float64)
    return 1.0 - v if metric in ("cosine", "recall_at_k", "agreement") else v


def score_gate(scores: Any, *, metric: str, tolerance: float, quantile: float,
               policy: TestPolicy = TestPolicy(), what: str = "engine vs emulation"
               ) -> EngineGate:
    """Gate per-example ``scores`` of the engine vs the emulation (cosine, recall@k: higher
    is better; kl, abs_logit: lower) with the sign-off's own share test
    (:func:`quantkit.verdict.score_signoff`): pass when at most ``quantile`` of the examples
    (the engine's part of ``verdict.score_quantile``, :func:`split_quantile`) is shown to
    have a deficit above ``tolerance``. ``observed`` / ``lower`` / ``upper``: the share
    outside and its bounds, held to ``quantile`` (the gate's ``tolerance``; the per-example
    tolerance is the record's ``engine_tolerance``). Its ``n_needed`` is sized for 80% power whatever
    ``policy.power``."""
    v = np.asarray(scores, dtype=np.float64)
    alpha = policy.alpha
    _check(int(v.size), tolerance, "score_gate")
    if metric not in SHARE_METRICS:
        raise ConfigError("score_gate is for per-example scores", where="score_gate(metric)",
                          value=metric, fix="use flip_gate for accuracy / agreement")
    higher = metric in ("cosine", "recall_at_k")
    threshold = 1.0 - tolerance if higher else tolerance
    t = score_signoff(v, metric=metric, threshold=threshold, quantile=quantile,
                      policy=replace(policy, power=FAITHFUL_POWER), candidate="engine")
    outside = float((engine_deficits(metric, v) > tolerance).mean())
    lo, hi = 1.0 - float(t.high), 1.0 - float(t.low)  # share within -> share outside
    status = _status(t.status)
    reasons = [f"{what}: {outside:.4f} of {v.size} examples with {metric} deficit above the "
               f"tolerance {tolerance:.4g} (bounds [{lo:.4f}, {hi:.4f}]) against at most "
               f"{quantile:.4g}: {_WHY[status]}"]
    return _from_signoff(t, status, metric, observed=outside, bounds=(lo, hi),
                         limit=quantile, alpha=alpha, reasons=reasons)
