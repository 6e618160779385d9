"""Per-tensor range choice by the error of the consuming layers' outputs.

For every activation tensor an INT8 node reads, the candidates are each calibrator's amax
(the histograms of the one streaming pass give them for free) and a grid of clips
``f x max`` (``f`` geometric in [``min_fraction``, 1], and never below the smallest
calibrator amax when calibrator candidates are given: the small subset cannot see the rare
values the full pass saw, so a clip tuned on it alone overfits). Each candidate is scored on a small
calibration subset (captured once, ``ptq.capture.capture_tensors``) by the normalized
squared error of every INT8 reader's output, that reader computing on its INT8 weight and
its other activation inputs quantized at their current amax, against the FP32 output of the
same layer on the same inputs. The best candidate wins (ties keep the current amax).

A tensor read by several INT8 nodes (BERT's LayerNorm output feeds query, key and value)
gets one range (``Plan.activation_amax`` is per tensor). ``combine="widest"`` (default)
takes the widest of the readers' own best ranges: a reader whose error is amplified
downstream (the key projection, through the attention softmax) is never clipped for the
benefit of the others; measured on MiniLM, the summed error (``combine="sum"``) clipped the
key input and kept 5% of predictions flipped. ``combine="sum"`` minimizes the summed
normalized error.

Call **after calibration and build_plan, before Q/DQ insertion**; the result replaces
``plan.activation_amax`` (``dataclasses.replace(plan, activation_amax=...)``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from quantkit.errors import CalibrationError, ConfigError
from quantkit.precision.plan import Plan
from quantkit.ptq.bias_correction import quantized_weight
from quantkit.ptq.layer_runner import LayerRunner, initializer_array
from quantkit.ptq.step_record import StepRecord
from quantkit.graph.facts import constant_tensors, quant_slots, tensor_infos
from quantkit.qdq.scales import fake_quantize, int8_scale

log = logging.getLogger(__name__)

__all__ = ["int8_inputs", "search_ranges", "candidates_from_ranges"]


def int8_inputs(model: onnx.ModelProto, plan: Plan, *, infos=None) -> dict[str, list[str]]:
    """activation tensor -> INT8 nodes of ``plan`` that read it (graph order). ``infos``: the
    model's tensor facts when known (``ModelGraph.infos``), else inferred."""
    infos = tensor_infos(model) if infos is None else infos
    consts = constant_tensors(model.graph)
    int8 = set(plan.int8_nodes())
    out: dict[str, list[str]] = {}
    for n in model.graph.node:
        if n.name in int8:
            for s in quant_slots(n, infos, consts).activations:
                out.setdefault(n.input[s], [])
                if n.name not in out[n.input[s]]:
                    out[n.input[s]].append(n.name)
    return out


def candidates_from_ranges(ranges: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """tensor -> {calibrator: amax} from ``{calibrator: Ranges}`` (compute_ranges' result)."""
    out: dict[str, dict[str, float]] = {}
    for method, r in ranges.items():
        for t, a in r.amax.items():
            out.setdefault(t, {})[method] = float(a)
    return out


#: ways to score a reader's output error (``error=`` of :func:`search_ranges`)
ERRORS = ("tensor", "row")
#: ``error="row"``: a row's signal power is floored at this fraction of the mean row power
#: (rows of padding / near-zero outputs would otherwise dominate)
_ROW_FLOOR = 0.01


@dataclass(frozen=True)
class _Target:
    """A reader's FP32 output on one batch, as float64, with the power its error is
    normalized by, computed once per batch instead of once per candidate. :meth:`nmse`:
    the normalized squared error of an output against it. ``tensor``: over the whole
    tensor (a few rows of large values, e.g. a transformer's massive-activation tokens,
    dominate it); ``row``: per row of the last axis (one token's / position's output
    vector), each normalized by its own power (floored at :data:`_ROW_FLOOR` of the mean),
    averaged over rows, so every row counts."""

    ref: np.ndarray
    power: np.ndarray | float
    rows: bool

    @classmethod
    def of(cls, ref: np.ndarray, error: str = "tensor") -> "_Target":
        ref = ref.astype(np.float64)
        if error == "tensor" or ref.ndim < 2:
            return cls(ref, max(np.mean(ref ** 2), 1e-30), False)
        power = np.mean(ref ** 2, axis=-1).reshape(-1)
        floor = max(_ROW_FLOOR * float(np.mean(power)), 1e-30)
        return cls(ref, np.maximum(power, floor), True)

    def nmse(self, out: np.ndarray) -> float:
        if not self.rows:
            return float(np.mean((out - self.ref) ** 2) / self.power)
        err = np.mean((out - self.ref) ** 2, axis=-1).reshape(-1)
        return float(np.mean(err / self.power))


def search_ranges(model: onnx.ModelProto, plan: Plan, samples: Mapping[str, Sequence[np.ndarray]],
                  candidates: Mapping[str, Mapping[str, float]] | None = None, *,
                  grid: int = 16, min_fraction: float = 0.1, combine: str = "widest",
                  error: str = "tensor", infos=None, memo: dict | None = None
                  ) -> tuple[dict[str, float], StepRecord]:
    """New ``activation_amax`` for ``plan``: per tensor the candidate with the least
    output error of its INT8 readers on ``samples`` (tensor -> batches, FP32 values of
    every INT8 node's activation inputs).

    ``memo``: a dict shared by the searches of several plans of one ``model`` on the same
    ``samples`` and ``error`` (the calibrators' plans: their candidate values are the same,
    only which one is current differs): an error already measured for (tensor, reader,
    candidate amax, the reader's other inputs' amax) is read back, and a reader's session
    and FP32 outputs are made only when one of its errors is not there. Same results."""
    if combine not in ("widest", "sum"):
        raise ConfigError("unknown way to combine the readers of a tensor",
                          where="ptq.range_search.combine", value=combine,
                          fix="use widest or sum")
    if error not in ERRORS:
        raise ConfigError("unknown range-search error measure", where="ptq.range_search_error",
                          value=error, fix="use tensor or row")
    measure = error
    infos = tensor_infos(model) if infos is None else infos
    readers = int8_inputs(model, plan, infos=infos)
    by_name = {n.name: n for n in model.graph.node}
    consts = constant_tensors(model.graph)
    amax = dict(plan.activation_amax)
    missing = [t for t in readers if t not in samples]
    if missing:
        raise CalibrationError("range search has no captured samples for an INT8 input",
                               where="ptq.range_search", value=missing[0],
                               fix="capture every tensor of int8_inputs(model, plan)")
    memo = {} if memo is None else memo
    runners: dict[str, tuple[LayerRunner, list[str], str | None, np.ndarray | None]] = {}
    refs: dict[str, list[_Target]] = {}
    slots_of = {name: quant_slots(by_name[name], infos, consts)
                for names in readers.values() for name in names}
    acts_of = {name: [by_name[name].input[s] for s in slots.activations]
               for name, slots in slots_of.items()}

    def reader(name: str):
        """The reader's runner (opened on first use) and its FP32 outputs per batch."""
        if name not in runners:
            n, slots, acts = by_name[name], slots_of[name], acts_of[name]
            w_name = n.input[slots.weight] if slots.weight is not None else None
            w = initializer_array(model, w_name) if w_name else None
            wq = quantized_weight(n, w) if w_name else None
            fed = acts + ([w_name] if w_name else [])
            ranks = {t: samples[t][0].ndim for t in acts}
            if w_name:
                ranks[w_name] = wq.ndim
            r = LayerRunner(model, n, fed, ranks).__enter__()
            runners[name] = (r, acts, w_name, wq)
            refs[name] = [_Target.of(r.run({**{t: samples[t][b] for t in acts},
                                            **({w_name: w} if w_name else {})}), measure)
                          for b in range(len(samples[acts[0]]))]
        return runners[name], refs[name]

    last_use = {name: t for t, names in readers.items() for name in names}
    changes, skipped = {}, {}
    try:
        for t, names in readers.items():
            if t not in amax:
                skipped[t] = "no calibrated amax"
                continue
            observed = max(float(np.max(np.abs(x))) for x in samples[t])
            top = max([observed, amax[t], *(candidates or {}).get(t, {}).values()])
            cands = {"current": amax[t]}
            cands.update({k: v for k, v in (candidates or {}).get(t, {}).items() if v > 0})
            # the subset cannot see rare values the full stream saw: never clip harder
            # than the most aggressive calibrator of the full pass
            given = [v for k, v in cands.items() if k != "current"]
            lo = max(min_fraction, min(given) / top) if given else min_fraction
            for f in np.geomspace(min(lo, 1.0), 1.0, grid):
                cands[f"clip {f:.3f}"] = float(top * f)

            fixed: dict[tuple[str, int], np.ndarray] = {}  # the other inputs, quantized once

            def error(a: float, name: str) -> float:
                key = (t, name, float(a), tuple((u, amax.get(u)) for u in acts_of[name]
                                                 if u != t))
                if key in memo:
                    return memo[key]
                (r, acts, w_name, wq), targets = reader(name)
                total = 0.0
                for b, ref in enumerate(targets):
                    feed = {}
                    for u in acts:
                        if u == t:
                            feed[u] = fake_quantize(samples[u][b], int8_scale(a))
                            continue
                        if (u, b) not in fixed:
                            fixed[u, b] = fake_quantize(samples[u][b], int8_scale(amax[u]))
                        feed[u] = fixed[u, b]
                    if w_name:
                        feed[w_name] = wq
                    total += ref.nmse(r.run(feed))
                memo[key] = total
                return total

            scores = {k: {name: error(v, name) for name in names} for k, v in cands.items()}

            def best_of(score) -> str:
                return min(score, key=lambda k: (score[k], k != "current"))

            if combine == "sum" or len(names) == 1:
                best = best_of({k: sum(v.values()) for k, v in scores.items()})
            else:  # the widest of the readers' own best candidates
                best = max((best_of({k: v[name] for k, v in scores.items()}) for name in names),
                           key=lambda k: cands[k])
            if best != "current" and cands[best] != amax[t]:
                changes[t] = (f"amax {amax[t]:.4g} -> {cands[best]:.4g} ({best}); layer error "
                              f"{sum(scores['current'].values()):.3g} -> "
                              f"{sum(scores[best].values()):.3g}")
                amax[t] = cands[best]
            for name in names:  # a reader done with: its session and outputs go
                if last_use[name] == t and name in runners:
                    runners.pop(name)[0].__exit__(None, None, None)
                    refs.pop(name)
    finally:
        for r, *_ in runners.values():
            r.__exit__(None, None, None)
    log.info("range search: %d of %d tensors changed", len(changes), len(readers))
    params = {"grid": int(grid), "min_fraction": float(min_fraction), "combine": combine}
    if measure != "tensor":
        params["error"] = measure
    return amax, StepRecord("range_search", params,
                            changes, skipped)
