"""The fewest nodes to keep in FP16 so that the verdict PASSes, in O(log L) full evaluations.

Polygraphy's ``debug precision`` bisects a prefix / suffix of TensorRT layers in graph order;
INC / NNCF pay one full evaluation per layer. Here a sensitivity ranking
(``quantkit.precision.sensitivity``) orders the L INT8 nodes, most sensitive first, and
``S(k)`` = the top k of the ranking kept in FP16 (everything else INT8).

Algorithm (:func:`search_fp16_set`), assuming PASS is monotone in k:

1. Baseline: evaluate ``S(0)`` (full INT8). PASS -> done.
2. Gallop: evaluate ``S(1), S(2), S(4), ...`` (capped at ``S(L)``) until one PASSes.
   ``S(L)`` (every ranked node FP16) is evaluated only when every smaller power of two
   failed: it is not assumed to PASS, because the search only ever returns a set whose
   PASS was measured. If ``S(L)`` fails too, no set passes: the result is the best metric.
3. Bisect between the last failing and the first passing k, keeping ``hi`` a measured PASS.
4. Prune (``prune=True``): the ranking may be imperfect, so try dropping members of the
   found set from its least sensitive end, one full evaluation each, keeping a drop when
   the smaller set still PASSes. The last member is skipped (``S(k* - 1)`` failed already).
   Pruning stops when the evaluation bound or the budget is used up.

Bound. Let ``c = ceil(log2 L)``. The gallop evaluates the powers of two below L and then L:
at most ``c + 1`` sets. Passing at ``2^i`` leaves ``2^(i-1) - 1`` untested k between the
last failure ``2^(i-1)`` and it; passing at L leaves at most ``L - 2^(c-1) - 1 <= 2^(c-1) - 1``;
bisecting ``m - 1`` untested values takes ``ceil(log2 m) <= c - 1`` evaluations. With the
baseline: at most ``1 + (c + 1) + (c - 1) = 2c + 1`` evaluations, or ``c + 2`` when nothing
passes; pruning may use the rest of ``2c + 2`` (:func:`max_evals_bound`). For a good ranking
the cost is ``2 ceil(log2 k*) + 2`` for the k* layers actually needed (2 when one is), not
``log2 L``. When PASS is not monotone (noise near the margin), the result is still a
measured PASS, just maybe not the smallest.

Budget: the only budget that can change what is found counts evaluations. Before each new
evaluation the search stops if ``max_full_evals`` evaluations were done and reports the best
set so far: the PASS with the fewest FP16 nodes, else the best metric;
``budget_exhausted=True`` with the reason. The same ranking and the same evaluations
therefore give the same result on any machine, under any load, cold or warm.

``max_seconds`` is a wall-clock *limit*, not a budget: when that much time has passed before
a new evaluation, the search raises :class:`SearchTimeLimit` (a ``QuantkitError``) and
returns nothing, because a result cut by seconds would depend on the machine's speed and
load. A running evaluation is never interrupted. ``max_seconds=None`` (default) means no
limit.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quantkit.errors import ConfigError, DataError, QuantkitError
from quantkit.graph.selection import node_name_list
from quantkit.precision.plan import Plan, Precision
from quantkit.verdict.outcome import STATUSES

log = logging.getLogger(__name__)

__all__ = ["EvalResult", "SearchResult", "SearchTimeLimit", "linear_evals_needed",
           "max_evals_bound", "pareto", "plan_with_fp16", "search_fp16_set"]

#: Reason written into the Plan for nodes the search keeps in FP16.
SEARCH_REASON = "kept FP16 by sensitivity search"


@dataclass(frozen=True)
class EvalResult:
    """One full evaluation of a candidate: verdict status, metric, its interval, seconds.

    ``metric`` is what :func:`pareto` and the budget fallback compare (e.g. the accuracy delta
    vs FP32; higher is better unless the search is told otherwise); ``interval`` its
    ``(low, high)``; ``extra`` anything else (the verdict dict, artifact hash...), kept as is.
    """

    status: str
    metric: float
    interval: tuple[float, float]
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise DataError("unknown evaluation status", where="EvalResult.status",
                            value=self.status, fix=f"use one of {', '.join(STATUSES)}")
        low, high = self.interval
        object.__setattr__(self, "metric", float(self.metric))
        object.__setattr__(self, "interval", (float(low), float(high)))
        object.__setattr__(self, "seconds", float(self.seconds))

    @classmethod
    def from_verdict(cls, verdict: Any, *, seconds: float = 0.0, **extra: Any) -> "EvalResult":
        """From a verdict dict (``to_dict()``) or a ``SignoffTest`` (the dev sign-off
        test): metric = the primary
        metric's delta (candidate - FP32), interval = its CI; the verdict dict goes into
        ``extra``."""
        if hasattr(verdict, "to_verdict_dict"):  # a quantkit.verdict.SignoffTest
            verdict = verdict.to_verdict_dict()
        d = dict(verdict) if isinstance(verdict, Mapping) else verdict.to_dict()
        delta = d["deltas"][d["metric"]]
        return cls(status=d["status"], metric=delta["point"],
                   interval=(delta["low"], delta["high"]), seconds=seconds,
                   extra={"verdict": d, **extra})


@dataclass
class SearchResult:
    """What :func:`search_fp16_set` found and every evaluation it paid for.

    ``fp16_nodes``: the chosen set in ranking order (``fp16_set`` as a frozenset);
    ``status``: that set's status (None when nothing was evaluated); ``k``: the smallest
    passing prefix size before pruning (None without a PASS); ``pruned``: nodes pruning
    removed from ``S(k)``; ``evaluations``: one dict per full evaluation (``index``,
    ``phase``, ``k`` (None for non-prefix sets), ``fp16_count``, ``fp16_set``, ``status``,
    ``metric``, ``interval``, ``seconds``, ``extra``); ``bound``: 2 ceil(log2 L) + 2.
    ``bool(result)`` is True only for a PASS.
    """

    fp16_nodes: list[str]
    status: str | None
    metric: float | None
    interval: tuple[float, float] | None
    k: int | None
    evaluations: list[dict[str, Any]]
    budget_exhausted: bool
    reason: str
    seconds: float
    bound: int
    num_layers: int
    pruned: list[str] = field(default_factory=list)
    #: the chosen set read again on data the choice never saw (``confirm``): one row per
    #: set read, in order; empty when the search had no ``confirm``
    confirmation: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fp16_set(self) -> frozenset[str]:
        return frozenset(self.fp16_nodes)

    @property
    def full_evals(self) -> int:
        return len(self.evaluations)

    def __bool__(self) -> bool:
        return self.status == "PASS"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (non-finite metrics become None)."""
        def num(x: Any) -> Any:
            return x if x is None or math.isfinite(x) else None

        return {
            "fp16_nodes": list(self.fp16_nodes), "status": self.status,
            "metric": num(self.metric),
            "interval": None if self.interval is None else [num(v) for v in self.interval],
            "k": self.k, "pruned": list(self.pruned), "full_evals": self.full_evals,
            "bound": self.bound, "num_layers": self.num_layers,
            "budget_exhausted": self.budget_exhausted, "reason": self.reason,
            "seconds": self.seconds,
            "confirmation": [dict(c, metric=num(c["metric"]),
                                  interval=[num(v) for v in c["interval"]])
                             for c in self.confirmation],
            "evaluations": [dict(e, metric=num(e["metric"]),
                                 interval=[num(v) for v in e["interval"]])
                            for e in self.evaluations],
        }


def max_evals_bound(num_layers: int) -> int:
    """``2 * ceil(log2 L) + 2`` full evaluations (2 for L <= 1): the most the search uses."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ConfigError("the number of layers must be an integer >= 0",
                          where="precision.max_evals_bound", value=num_layers,
                          fix="pass len(ranking)")
    return 2 * math.ceil(math.log2(num_layers)) + 2 if num_layers > 1 else 2


def plan_with_fp16(plan: Plan, fp16_set: Iterable[str], *, reason: str = SEARCH_REASON) -> Plan:
    """``plan`` with the INT8 nodes of ``fp16_set`` kept in FP16 (what one candidate runs)."""
    nodes = [n for n in plan.int8_nodes() if n in set(fp16_set)]
    extra = sorted(set(fp16_set) - set(plan.int8_nodes()))
    if extra:
        raise ConfigError("the FP16 set names a node that is not INT8 in the plan",
                          where="precision.plan_with_fp16", value=extra[0],
                          fix="rank only plan.int8_nodes()")
    return plan.with_precision(nodes, Precision.FP16, reason) if nodes else plan


class SearchTimeLimit(QuantkitError):
    """The search's wall-clock limit (``precision.search.max_minutes``) stopped the run."""


class _Budget(Exception):
    """Raised inside the search when the evaluation budget is used up."""


class _Search:
    def __init__(self, ranking: list[str], full_eval, *, max_full_evals: int,
                 max_seconds: float | None, higher_is_better: bool) -> None:
        self.ranking = ranking
        self.position = {n: i for i, n in enumerate(ranking)}
        self.full_eval = full_eval
        self.max_full_evals = max_full_evals
        self.max_seconds = max_seconds
        self.higher = higher_is_better
        self.bound = max_evals_bound(len(ranking))
        self.evaluations: list[dict[str, Any]] = []
        self.cache: dict[frozenset[str], EvalResult] = {}
        self.start = time.perf_counter()
        self.stop_reason = ""
        self.pruning_stopped = ""

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def prefix(self, k: int) -> frozenset[str]:
        return frozenset(self.ranking[:k])

    def ordered(self, fp16: frozenset[str]) -> list[str]:
        return sorted(fp16, key=self.position.__getitem__)

    def budget_left(self) -> bool:
        if len(self.evaluations) >= self.max_full_evals:
            self.stop_reason = (f"max_full_evals={self.max_full_evals} full evaluations "
                                f"used up")
            return False
        return True

    def check_time_limit(self) -> None:
        """Raise SearchTimeLimit when the wall-clock limit has passed (never a silent stop)."""
        if self.max_seconds is not None and self.elapsed() >= self.max_seconds:
            raise SearchTimeLimit(
                f"the sensitivity search hit its wall-clock limit after "
                f"{len(self.evaluations)} of at most {min(self.max_full_evals, self.bound)} "
                f"evaluations; no result is reported because one cut by seconds would depend "
                f"on the machine's speed and load",
                where="precision.search.max_minutes", value=round(self.max_seconds / 60.0, 3),
                fix="raise precision.search.max_minutes (or set it to null), or lower "
                    "precision.search.max_full_evals, the budget that decides what is found")

    def evaluate(self, fp16: frozenset[str], phase: str) -> EvalResult:
        if fp16 in self.cache:
            return self.cache[fp16]
        if not self.budget_left():
            raise _Budget(self.stop_reason)
        self.check_time_limit()
        t0 = time.perf_counter()
        res = self.full_eval(fp16)
        wall = time.perf_counter() - t0
        if isinstance(res, Mapping):
            res = EvalResult(**res)
        if not isinstance(res, EvalResult):
            raise DataError("full_eval must return an EvalResult", where="precision.search",
                            value=type(res).__name__,
                            fix="return EvalResult(status, metric, (low, high), seconds)")
        seconds = res.seconds if res.seconds > 0 else wall
        k = len(fp16) if fp16 == self.prefix(len(fp16)) else None
        row = {"index": len(self.evaluations), "phase": phase, "k": k,
               "fp16_count": len(fp16), "fp16_set": self.ordered(fp16), "status": res.status,
               "metric": res.metric, "interval": list(res.interval), "seconds": seconds,
               "extra": dict(res.extra)}
        self.evaluations.append(row)
        self.cache[fp16] = res
        log.info("search eval %d (%s): %d FP16 node(s)%s -> %s, metric %.6g [%.6g, %.6g], "
                 "%.2f s", row["index"], phase, len(fp16), "" if k is None else f" (k={k})",
                 res.status, res.metric, *res.interval, seconds)
        return res

    def passes(self, k: int, phase: str) -> bool:
        return self.evaluate(self.prefix(k), phase).status == "PASS"

    def run(self, prune: bool, *, reserve: bool = False
            ) -> tuple[int | None, list[str], list[str], str]:
        """(k*, chosen nodes, pruned nodes, note); raises _Budget when the budget runs out.
        ``reserve``: pruning leaves the evaluations a confirmation's escalation from k* to L
        needs (one per doubling)."""
        L = len(self.ranking)
        if self.passes(0, "baseline"):
            return 0, [], [], "full INT8 passes (no layer needs to be kept out)"
        lo, hi = 0, None  # lo: largest k measured to fail; hi: smallest k measured to pass
        step = 1
        while hi is None:
            k = min(step, L)
            if k <= lo:  # L == 0: nothing to gallop over
                break
            if self.passes(k, "gallop"):
                hi = k
            else:
                lo = k
                if k == L:
                    break
                step *= 2
        if hi is None:
            return None, [], [], (f"no set passes: even all {L} ranked node(s) in FP16 "
                                  f"do not PASS" if L else "no node to keep in FP16")
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.passes(mid, "bisect"):
                hi = mid
            else:
                lo = mid
        chosen = list(self.ranking[:hi])
        pruned: list[str] = []
        note = f"smallest passing prefix found: k={hi}"
        candidates = list(reversed(self.ranking[:hi - 1])) if prune else []
        kept = math.ceil(math.log2(L / hi)) if reserve and hi < L else 0
        limit = self.bound - kept
        for j, node in enumerate(candidates):
            if len(self.evaluations) >= limit:
                note += (f"; pruning stopped at {limit} evaluations "
                         + (f"(the bound {self.bound} less {kept} kept for the confirmation's "
                            f"escalation) " if kept else "(the bound) ")
                         + f"with {len(candidates) - j} member(s) untried")
                break
            trial = frozenset(chosen) - {node}
            try:
                ok = self.evaluate(trial, "prune").status == "PASS"
            except _Budget:
                self.pruning_stopped = (f"{self.stop_reason} while pruning, "
                                        f"{len(candidates) - j} member(s) untried")
                break
            if ok:
                chosen.remove(node)
                pruned.append(node)
        return hi, chosen, pruned, note

    def best(self) -> dict[str, Any] | None:
        """The PASS with the fewest FP16 nodes, else the best metric (fewest nodes on ties)."""
        if not self.evaluations:
            return None
        passing = [e for e in self.evaluations if e["status"] == "PASS"]
        if passing:
            return min(passing, key=lambda e: (e["fp16_count"], e["index"]))
        sign = -1.0 if self.higher else 1.0

        def key(e: dict[str, Any]) -> tuple:
            m = e["metric"]
            return (math.isnan(m), sign * m if not math.isnan(m) else 0.0,
                    e["fp16_count"], e["index"])
        return min(self.evaluations, key=key)


def search_fp16_set(ranking: Sequence[str],
                    full_eval: Callable[[frozenset[str]], EvalResult], *,
                    max_full_evals: int, max_seconds: float | None = None, prune: bool = True,
                    higher_is_better: bool = True,
                    confirm: Callable[[frozenset[str]], EvalResult] | None = None
                    ) -> SearchResult:
    """The fewest top-ranked nodes to keep FP16 so ``full_eval`` PASSes (module docstring).

    ``confirm(fp16_set)``: the same candidate read on data the choice never saw (the other
    half of dev, quantkit/run/dev_halves.py; it costs no full evaluation). A non-empty set
    the search returns as PASS is confirmed with it; when the confirmation does not PASS, the
    search escalates through larger prefixes (``S(2k)``, ``S(4k)``, ... ``S(L)``, each a full
    evaluation within the budget) and keeps the first that PASSes both; if none does, the
    set with the best confirmation metric, with its confirmation status.

    ``ranking``: INT8 node names, most sensitive first; ``full_eval(fp16_set)`` builds and
    evaluates the candidate with those nodes FP16 and returns an :class:`EvalResult`.
    At most ``min(max_full_evals, max_evals_bound(len(ranking)))`` evaluations; the result
    depends only on the ranking and the evaluations. ``max_seconds`` (None = no limit) is a
    wall-clock limit: passing it before a new evaluation raises :class:`SearchTimeLimit`.
    ``higher_is_better`` orders ``metric`` for the no-PASS fallback (and is what
    :func:`pareto` should be given).
    """
    names = node_name_list(ranking, where="precision.search_fp16_set(ranking)", what="ranking",
                           fix="pass sensitivity.rank(scores)")
    if isinstance(max_full_evals, bool) or not isinstance(max_full_evals, int) \
            or max_full_evals < 0:
        raise ConfigError("max_full_evals must be an integer >= 0",
                          where="precision.search.max_full_evals", value=max_full_evals,
                          fix=f"use e.g. {max_evals_bound(len(names))} "
                              f"(= 2 ceil(log2 L) + 2 for L={len(names)})")
    if max_seconds is not None and (isinstance(max_seconds, bool)
                                    or not isinstance(max_seconds, (int, float))
                                    or not max_seconds >= 0):
        raise ConfigError("max_seconds must be a number >= 0 or None",
                          where="precision.search.max_minutes", value=max_seconds,
                          fix="use e.g. 3600 seconds, or None for no wall-clock limit")
    s = _Search(names, full_eval, max_full_evals=max_full_evals,
                max_seconds=None if max_seconds is None else float(max_seconds),
                higher_is_better=higher_is_better)
    exhausted = False
    try:
        k, chosen, pruned, note = s.run(prune, reserve=confirm is not None)
    except _Budget as stop:
        exhausted, k, chosen, pruned, note = True, None, [], [], str(stop)
    if exhausted:
        best = s.best()
        if best is None:
            result = SearchResult([], None, None, None, None, s.evaluations, True,
                                  f"budget exhausted before any evaluation: {note}",
                                  s.elapsed(), s.bound, len(names))
        else:
            what = ("best PASS so far" if best["status"] == "PASS"
                    else "no PASS yet; best metric so far")
            result = SearchResult(list(best["fp16_set"]), best["status"], best["metric"],
                                  tuple(best["interval"]), best["k"] if best["status"] == "PASS"
                                  else None, s.evaluations, True,
                                  f"budget exhausted ({note}); {what}: "
                                  f"{best['fp16_count']} FP16 node(s)", s.elapsed(), s.bound,
                                  len(names))
    elif k is None:
        best = s.best()
        result = SearchResult(list(best["fp16_set"]), best["status"], best["metric"],
                              tuple(best["interval"]), None, s.evaluations, False,
                              f"{note}; best metric: {best['fp16_count']} FP16 node(s)",
                              s.elapsed(), s.bound, len(names))
    else:
        res = s.cache[frozenset(chosen)]
        reason = note + (f"; pruning removed {len(pruned)}: {', '.join(pruned)}" if pruned
                         else "")
        if s.pruning_stopped:
            reason = f"budget exhausted ({s.pruning_stopped}); {reason}"
        result = SearchResult(chosen, res.status, res.metric, res.interval, k, s.evaluations,
                              bool(s.pruning_stopped), reason, s.elapsed(), s.bound,
                              len(names), pruned)
    if confirm is not None and result.status == "PASS" and result.fp16_nodes:
        result = _confirmed(s, result, confirm)
    log.info("search: %s with %d FP16 node(s) after %d full evaluation(s) (bound %d): %s",
             result.status, len(result.fp16_nodes), result.full_evals, result.bound,
             result.reason)
    return result


def _confirmed(s: _Search, result: SearchResult,
               confirm: Callable[[frozenset[str]], EvalResult]) -> SearchResult:
    """``result`` (a PASS on the choice's data) read on the confirmation data, escalated
    through larger prefixes while it does not PASS there (:func:`search_fp16_set`)."""
    L = len(s.ranking)
    sets = [result.fp16_set]
    k = len(result.fp16_set) if result.k is None else result.k
    while k < L:
        k = min(2 * k, L)
        sets.append(s.prefix(k))
    if result.k is not None and result.pruned:  # the unpruned prefix before the larger ones
        sets.insert(1, s.prefix(result.k))
    rows: list[dict[str, Any]] = []
    chosen, stop = None, ""
    for fp16 in dict.fromkeys(sets):
        try:
            own = s.evaluate(fp16, "escalate")
        except _Budget as b:
            stop = f"; escalation stopped: {b}"
            break
        if own.status != "PASS":
            continue
        c = confirm(fp16)
        rows.append({"fp16_count": len(fp16), "fp16_set": s.ordered(fp16), "status": c.status,
                     "metric": c.metric, "interval": list(c.interval),
                     "extra": dict(c.extra)})
        log.info("search confirmation: %d FP16 node(s) -> %s, metric %.6g [%.6g, %.6g]",
                 len(fp16), c.status, c.metric, *c.interval)
        if c.status == "PASS":
            chosen = (fp16, c)
            break
    if chosen is None:
        sign = 1.0 if s.higher else -1.0
        best = max(rows, key=lambda r: (sign * r["metric"] if math.isfinite(r["metric"])
                                        else -math.inf, -r["fp16_count"]))
        fp16 = frozenset(best["fp16_set"])
        res = EvalResult(best["status"], best["metric"], tuple(best["interval"]))
        why = (f"; not confirmed on the held-out half of dev by any of {len(rows)} set(s) "
               f"read there{stop}: kept the best confirmation ({len(fp16)} FP16 node(s), "
               f"{best['status']})")
    else:
        fp16, res = chosen
        why = (f"; confirmed on the held-out half of dev with {len(fp16)} FP16 node(s)"
               + (f" after {len(rows) - 1} set(s) that were not" if len(rows) > 1 else ""))
    k_out = len(fp16) if fp16 == s.prefix(len(fp16)) else result.k
    return SearchResult(s.ordered(fp16), res.status, res.metric, res.interval, k_out,
                        s.evaluations, result.budget_exhausted or bool(stop),
                        result.reason + why, s.elapsed(), s.bound, result.num_layers,
                        result.pruned if fp16 == result.fp16_set else [], rows)


def pareto(evaluations: Iterable[Mapping[str, Any]], *,
           higher_is_better: bool = True) -> list[dict[str, Any]]:
    """Non-dominated evaluations: fewer FP16 nodes vs better metric, by FP16 count ascending.

    A point is dominated when another has no more FP16 nodes and no worse metric, and is
    strictly better in one of them. Of identical (count, metric) points the first is kept.
    Evaluations without a finite metric are left out. Rows: ``fp16_count``, ``metric``,
    ``status``, ``fp16_set``, ``k``, ``index`` (position in ``evaluations``).
    """
    sign = 1.0 if higher_is_better else -1.0
    points = []
    for i, e in enumerate(evaluations):
        m = e.get("metric")
        if m is None or not math.isfinite(float(m)):
            continue
        fp16 = list(e.get("fp16_set", ()))
        count = int(e.get("fp16_count", len(fp16)))
        points.append({"fp16_count": count, "metric": float(m), "status": e.get("status"),
                       "fp16_set": fp16, "k": e.get("k"), "index": int(e.get("index", i))})
    # sort by count ascending, then metric best first; keep points that beat every earlier one
    points.sort(key=lambda p: (p["fp16_count"], -sign * p["metric"], p["index"]))
    front: list[dict[str, Any]] = []
    for p in points:
        if front and sign * p["metric"] <= sign * front[-1]["metric"]:
            continue
        front.append(p)
    return front


def linear_evals_needed(ranking: Sequence[str], fp16_set: Iterable[str] | None, *,
                        per_layer_measurement: bool = False) -> int:
    """Full evaluations a one-layer-at-a-time (INC-style) fallback needs for the same answer.

    INC-style: evaluate full INT8, then restore nodes to FP16 one by one in ranking order,
    evaluating after each, until PASS. Reaching a set that contains ``fp16_set`` takes
    ``k_lin + 1`` evaluations, ``k_lin`` = 1 + the largest ranking position of a member
    (0 for an empty set). ``fp16_set=None`` (no set passed) counts all ``L + 1``.
    ``per_layer_measurement=True`` adds the ``L`` full evaluations INC spends measuring each
    layer's sensitivity itself (instead of a one-pass proxy): ``L + k_lin + 1``.
    """
    names = node_name_list(ranking, where="precision.search_fp16_set(ranking)", what="ranking",
                           fix="pass sensitivity.rank(scores)")
    L = len(names)
    if fp16_set is None:
        k_lin = L
    else:
        pos = {n: i for i, n in enumerate(names)}
        members = list(fp16_set)
        unknown = [n for n in members if n not in pos]
        if unknown:
            raise ConfigError("the FP16 set names a node that is not in the ranking",
                              where="precision.linear_evals_needed", value=unknown[0],
                              fix="pass the ranking the search used")
        k_lin = 1 + max((pos[n] for n in members), default=-1)
    return k_lin + 1 + (L if per_layer_measurement else 0)
