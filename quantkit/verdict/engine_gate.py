"""The engine check: one bound for the deployed artifact, and the gate that earns it.

The sign-off measures a candidate on the execution its numbers come from (the exact Q/DQ
emulation of the plan for ``target=tensorrt``); what ships is the artifact as the
deployment runtime runs it (a TensorRT engine). The declared budget ``D`` (the margin, or
the distance between the declared floor / ceiling and a perfect score) is therefore split
before any evaluation: the sign-off decides with what is left, the engine check must show
the engine within its tolerance ``t`` of the emulation, and together they bound the
deployed artifact by ``D`` (:func:`split_budget`). How the two parts add up depends on the
metric:

* accuracy (and macro-F1), top-1 agreement: an example whose top-1 prediction does not flip
  between emulation and engine keeps its correctness and its agreement with FP32, so the
  two executions differ by at most the flip rate ``f``: deployed delta >= signed delta - f
  (exact). ``t = share * D``, the sign-off decides at ``D - t``. For macro-F1 a flip can
  move a class's F1 by more than 1/n, so there the flip rate bounds accuracy exactly and
  macro-F1 only approximately (stated in the record).
* abs_logit: |ref - engine| <= |ref - emulation| + |emulation - engine| element-wise
  (triangle inequality), so the mean scores add (exact). ``t = share * D``.
* recall@k: with R, M, E the k-neighbour sets of FP32, emulation and engine of one query,
  |R & E| >= |R & M| + |M & E| - k, so the recall deficits (1 - recall) add (exact, per
  query on one gallery). ``t = share * D``.
* cosine: ``1 - cos = |u - v|^2 / 2`` for unit vectors, and the chord |u - v| is a metric;
  by Minkowski's inequality the root-mean deficits add: sqrt(mean deficit deployed) <=
  sqrt(signed) + sqrt(engine) (exact). The share splits the root: ``t = share^2 * D``,
  the sign-off decides at ``(1 - share)^2 * D``.
* KL: KL is not a metric, but to second order KL(p || q) = (1/2) d_F(p, q)^2 with the
  Fisher-Rao distance d_F (Kullback 1959, ch. 2.6; Amari & Nagaoka 2000, sec. 3.5), so the
  same root split holds for small divergences (second order, stated in the record).

The gate (:func:`flip_gate`, :func:`score_gate`) PASSes only when the upper confidence bound
of the engine's deficit vs the emulation is within ``t``: an exact Clopper-Pearson bound on
the flip count (Clopper & Pearson 1934) for flips; the sign-off's own label-free test
(:func:`quantkit.verdict.score_signoff`, ``threshold`` = ``t``) for per-example scores.
A candidate may be recommended only when the gate PASSes (not merely "did not FAIL") where
the deployment runtime is the one checked. Simulated through the run's own path
(``benchmarks/engine_gate.py``: gate -> BackendCheck -> blocked_by_engine ->
recommend_candidate), an engine at the tolerance is recommended in at most about alpha of
the runs, one that flips a whole margin's worth of predictions almost never, and a faithful
engine more often the more examples are compared, so the default checks the whole dev split
(``compare.backend_check_subset``); the score gate is as valid as ``score_signoff`` is for
skewed scores (measured: benchmarks/results/engine_gate.md).

Both gates take the sign-off's :class:`~quantkit.verdict.policy.TestPolicy` (its alpha;
the score gate also its ``n_boot``, seed and ``min_n``).

Pure: numpy / scipy, randomness only from the policy's seed; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from scipy.stats import beta

from quantkit.errors import ConfigError
from quantkit.verdict.policy import TestPolicy

__all__ = ["DeploymentBudget", "EngineCheckPlan", "EngineGate", "FLIP_METRICS", "GATE_UNITS", "ROOT_METRICS",
           "flip_gate", "score_gate", "split_budget", "flip_bounds", "engine_deficits"]

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"

#: metrics whose engine gate counts top-1 flips between emulation and engine
FLIP_METRICS = ("accuracy", "macro_f1", "agreement")
#: metrics whose budget splits on the square root (cosine exact, KL to second order)
ROOT_METRICS = ("cosine", "kl")
#: what the gate measures, per decision metric (engine vs the emulation, per example)
GATE_UNITS = {"accuracy": "top-1 flip rate", "macro_f1": "top-1 flip rate",
              "agreement": "top-1 flip rate", "abs_logit": "mean |logit delta|",
              "kl": "mean KL(emulation || engine)", "cosine": "mean (1 - cosine)",
              "recall_at_k": "mean (1 - recall@k)",
              "map": "mAP@[.5:.95] deficit", "map50": "mAP@.5 deficit",
              "map75": "mAP@.75 deficit"}
_COMPOSITION = {
    "accuracy": "exact: a non-flipped example keeps its correctness",
    "macro_f1": "approximate: the flip rate bounds accuracy exactly, macro-F1 only roughly",
    "agreement": "exact: a non-flipped example keeps its agreement with FP32",
    "abs_logit": "exact: triangle inequality of |logit delta|",
    "recall_at_k": "exact: the k-neighbour set deficits add",
    "cosine": "exact: chord distances add (Minkowski), the budget splits on the root",
    "kl": "second order: KL = d_Fisher^2 / 2, the budget splits on the root",
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
    engine's tolerance vs the emulation (``tolerance``, in :data:`GATE_UNITS`)."""

    metric: str
    share: float
    declared: float
    signoff: float
    tolerance: float
    units: str
    composition: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_budget(metric: str, declared: float, share: float) -> DeploymentBudget:
    """Split ``declared`` (> 0) for ``metric`` by ``share`` in [0, 1) (0: no engine check
    stands between the signed numbers and the deployment; the sign-off keeps everything)."""
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
    return DeploymentBudget(metric=metric, share=float(share), declared=float(declared),
                            signoff=float(left), tolerance=float(tol), units=GATE_UNITS[metric],
                            composition=_COMPOSITION[metric])


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


def engine_deficits(metric: str, scores: Any) -> np.ndarray:
    """Per-example deficit of the engine vs the emulation in :data:`GATE_UNITS` from the
    per-example score (cosine, recall@k: 1 - score; kl, abs_logit: the score)."""
    v = np.asarray(scores, dtype=np.float64)
    return 1.0 - v if metric in ("cosine", "recall_at_k", "agreement") else v


def score_gate(scores: Any, *, metric: str, tolerance: float,
               policy: TestPolicy = TestPolicy(), what: str = "engine vs emulation"
               ) -> EngineGate:
    """Gate per-example ``scores`` of the engine vs the emulation (cosine, recall@k: higher
    is better; kl, abs_logit: lower) at ``tolerance`` on their mean deficit, with the
    sign-off's own label-free test (:func:`quantkit.verdict.score_signoff`): pass when it
    shows the mean within ``1 - tolerance`` (floors) or ``tolerance`` (ceilings). Its
    ``n_needed`` is sized for 80% power whatever ``policy.power``."""
    from quantkit.verdict.outcome import FAIL as S_FAIL
    from quantkit.verdict.outcome import PASS as S_PASS
    from quantkit.verdict.share_tests import score_signoff

    v = np.asarray(scores, dtype=np.float64)
    alpha = policy.alpha
    _check(int(v.size), tolerance, "score_gate")
    higher = metric in ("cosine", "recall_at_k")
    if metric not in ("cosine", "recall_at_k", "kl", "abs_logit"):
        raise ConfigError("score_gate is for per-example scores", where="score_gate(metric)",
                          value=metric, fix="use flip_gate for accuracy / agreement")
    threshold = 1.0 - tolerance if higher else tolerance
    t = score_signoff(v, metric=metric, threshold=threshold,
                      policy=replace(policy, power=0.8), candidate="engine")
    deficit = engine_deficits(metric, v)
    if higher:  # bounds of the mean score -> bounds of the mean deficit
        lo, hi = 1.0 - float(t.high), 1.0 - float(t.low)
    else:
        lo, hi = float(t.low), float(t.high)
    status = PASS if t.status == S_PASS else FAIL if t.status == S_FAIL else INCONCLUSIVE
    why = {PASS: "within it", FAIL: "above it",
           INCONCLUSIVE: "the interval does not decide"}[status]
    reasons = [f"{what}: {GATE_UNITS[metric]} {float(deficit.mean()):.4g} over {v.size} "
               f"examples (bounds [{lo:.4g}, {hi:.4g}]) against the tolerance "
               f"{tolerance:.4g}: {why}"]
    needed = t.plan_n if status == INCONCLUSIVE else None
    if needed:
        reasons.append(f"about {int(needed)} compared examples would decide")
    return EngineGate(status=status, metric=metric, units=GATE_UNITS[metric], n=int(v.size),
                      observed=float(deficit.mean()), lower=lo, upper=hi,
                      tolerance=float(tolerance), alpha=float(alpha),
                      n_needed=int(needed) if needed else None, reasons=tuple(reasons))
