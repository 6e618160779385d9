"""Stage "ptq": the post-training steps of quantkit/ptq as configured by ``settings.ptq``.

    scope = apply_ptq(ctx, scope)   # after quant_scope, before calibrate (app.py)

Equalization and SmoothQuant rewrite the graph that gets calibrated and quantized (its FP32
function is unchanged); the returned QuantScope carries that graph (``scope.ptq.graph``)
and is recomputed on it. :func:`quantkit.run.calibration.calibrate` calibrates that graph;
:func:`quantkit.run.artifacts.build_artifacts` runs range search and bias correction per
INT8 plan (:func:`refine_plan`). The FP32 reference stays the original model (``ctx.graph``):
every comparison is against its outputs. Per-layer comparison tensors whose FP32 values the
rewrite changed (a smoothed / equalized activation keeps its name but not its values) are
dropped from ``scope.compare_tensors`` and listed in the record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from quantkit.run.context import RunContext
from quantkit.run.scope import QuantScope, quant_scope

__all__ = ["PtqState", "apply_ptq", "ptq_key", "ptq_options", "refine_plan"]

log = logging.getLogger(__name__)

#: relative tolerance under which a comparison tensor counts as unchanged by the rewrite
_SAME_RTOL = 1e-3


@dataclass(frozen=True)
class PtqState:
    """``graph``: the ModelGraph that gets calibrated and quantized (``ctx.graph`` itself
    when no step rewrote it); ``records``: the StepRecords of the steps before calibration;
    ``dropped_compare``: per-layer comparison tensor -> why it was dropped."""

    options: Any  # quantkit.ptq.pipeline.PtqOptions
    graph: Any
    records: tuple = ()
    dropped_compare: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    rewritten: bool = False

    def to_record(self) -> dict:
        return {"settings": dict(self.settings), "graph_rewritten": self.rewritten,
                "graph_sha256": self.graph.sha256,
                "steps": [r.to_dict() for r in self.records],
                "dropped_compare_tensors": dict(self.dropped_compare)}


def ptq_key(ctx: RunContext) -> dict[str, Any]:
    """The ptq settings as a stage-cache key part (every key of ``settings.ptq``)."""
    return {"ptq": dataclasses.asdict(ctx.settings.ptq)}


def ptq_options(ctx: RunContext):
    """``settings.ptq`` -> quantkit.ptq.pipeline.PtqOptions."""
    from quantkit.ptq.pipeline import PtqOptions

    q = ctx.settings.ptq
    return PtqOptions(smoothquant_alpha=q.smoothquant_alpha,
                      smoothquant_min_outlier_ratio=q.smoothquant_min_outlier_ratio,
                      equalization=q.equalization,
                      equalization_iterations=q.equalization_iterations,
                      equalization_alpha=q.equalization_alpha, range_search=q.range_search,
                      range_search_grid=q.range_search_grid,
                      range_search_combine=q.range_search_combine,
                      range_search_error=q.range_search_error,
                      bias_correction=q.bias_correction, weight_rounding=q.weight_rounding,
                      int8_weights=q.int8_weights)


def calib_batches(ctx: RunContext):
    """A fresh iterable of calibration feed dicts per call (one FP32 pass each)."""
    return lambda: ctx.batches(ctx.splits.calib, ctx.settings.calibrator.batch_size)


def apply_ptq(ctx: RunContext, scope: QuantScope) -> QuantScope:
    """Equalization / SmoothQuant (when configured) on a copy of the FP32 graph -> the scope
    recomputed on that graph, carrying :class:`PtqState` as ``scope.ptq``."""
    from quantkit.graph.model_graph import ModelGraph
    from quantkit.ptq.pipeline import before_calibration

    opts = ptq_options(ctx)
    model, records = before_calibration(ctx.graph.model, calib_batches(ctx), opts)
    for r in records:
        log.info("ptq %s", r.summary())
    settings = ptq_key(ctx)["ptq"]
    if model is ctx.graph.model:
        state = PtqState(options=opts, graph=ctx.graph, records=tuple(records),
                         settings=settings)
        return dataclasses.replace(scope, ptq=state)
    graph = ModelGraph.build(model)
    new = quant_scope(dataclasses.replace(ctx, graph=graph))
    dropped = _changed_tensors(ctx, graph, scope.compare_tensors)
    if dropped:
        log.info("ptq: %d per-layer comparison tensors dropped (rewritten values): %s",
                 len(dropped), ", ".join(list(dropped)[:8]))
    state = PtqState(options=opts, graph=graph, records=tuple(records),
                     dropped_compare=dropped, settings=settings, rewritten=True)
    compare = tuple(t for t in scope.compare_tensors if t not in dropped)
    return dataclasses.replace(new, compare_tensors=compare, ptq=state)


def _changed_tensors(ctx: RunContext, graph, tensors) -> dict[str, str]:
    """Comparison tensors of the original graph missing from ``graph`` or with other FP32
    values there (first calibration batch)."""
    from quantkit.ptq.capture import capture_tensors

    names = set(graph.infos) | {i.name for i in graph.model.graph.input}
    out = {t: "not in the ptq-rewritten graph" for t in tensors if t not in names}
    keep = [t for t in tensors if t not in out]
    first = next(iter(ctx.batches(ctx.head(ctx.splits.calib, 8),
                                  ctx.settings.calibrator.batch_size)), None)
    if first is None or not keep:
        return out
    ref = capture_tensors(ctx.graph.model, [first], keep)
    new = capture_tensors(graph.model, [first], keep)
    for t in keep:
        a, b = ref[t][0], new[t][0]
        scale = float(np.max(np.abs(a))) if a.size else 0.0
        if a.shape != b.shape or float(np.max(np.abs(a - b), initial=0.0)) > \
                _SAME_RTOL * scale + 1e-6:
            out[t] = "FP32 values rescaled by the ptq rewrite (same name, other values)"
    return out


def refine_plan(ctx: RunContext, state: PtqState, plan, ranges: dict, memo: dict | None = None):
    """Range search, weight rounding, then bias correction for one INT8 plan on
    ``state.graph``.

    Returns ``(plan, model, records)``: the refined plan, the FP32 graph its Q/DQ goes into
    (``state.graph.model`` unless weight rounding or bias correction edited a copy) and the
    StepRecords.
    ``memo``: shared by the calibrators' plans of one run, so the bias-correction statistics
    (FP32 input means, one pass over the calibration split) are computed once per INT8 set
    (what :func:`quantkit.ptq.pipeline.before_qdq` does, with that pass shared).

    The searched ranges and the bias-correction means are stage-cached (``ptq_refine``)
    under everything that produced them: the graph, the plan, every calibrator's ranges,
    the calibration data and feeds, the ptq settings and the source of quantkit/ptq; a
    warm rerun recomputes only the (cheap) bias edit from the cached means. Weight rounding
    (``gptq``) does not depend on the ranges: its int8 weights are stage-cached per INT8 set
    (``ptq_rounding``), shared by the calibrators' plans (:func:`_rounded`); ``gptq_aware``
    sees each input's Q/DQ, so its entry is per plan (the searched ranges)."""
    from quantkit.ptq.bias_correction import correct_bias, input_channel_axes
    from quantkit.ptq.record import StepRecord

    opts, model = state.options, state.graph.model
    memo = {} if memo is None else memo
    axes = (input_channel_axes(model, plan.int8_nodes())
            if opts.bias_correction and plan.int8_nodes() else {})
    inputs = {"graph": state.graph.sha256, "plan": plan.to_dict(),
              "ranges": {m: r.amax for m, r in sorted(ranges.items())},
              "calib": ctx.splits.calib.sha256,
              "samples": ctx.settings.ptq.range_search_samples,
              "batch_size": ctx.settings.calibrator.batch_size,
              "max_length": ctx.settings.data.max_length, "axes": sorted(axes.items()),
              "code": _ptq_source_sha(), **ctx.feeds_key(), **ptq_key(ctx)}

    def compute():
        searched, records = _search(ctx, state, plan, ranges)
        means = _bias_means(ctx, model, axes, memo) if axes else {}
        return ({"activation_amax": searched.activation_amax,
                 "records": [r.to_dict() for r in records],
                 "means": sorted(means)},
                {f"mean{i}": means[t] for i, t in enumerate(sorted(means))})

    obj, arrays, hit = ctx.cached("ptq_refine", inputs, compute)
    searched = dataclasses.replace(plan, activation_amax=obj["activation_amax"])
    records = tuple(StepRecord(**r) for r in obj["records"])
    plan = _clip_ranges(plan, searched)
    edited = model
    if opts.weight_rounding != "nearest" and plan.int8_nodes():  # settings checked the name
        edited, rec = _rounded(ctx, state, plan)
        records = records + (rec,)
    if axes:
        means = {t: arrays[f"mean{i}"] for i, t in enumerate(obj["means"])}
        edited, rec = correct_bias(edited, plan.int8_nodes(), means)
        records = records + (rec,)
    for r in records:
        log.info("ptq %s (%s)%s", r.summary(), plan.calibrator, " [cached]" if hit else "")
    return plan, edited, records


def _rounded(ctx: RunContext, state: PtqState, plan):
    """``state.graph.model`` with GPTQ-rounded weights for ``plan``'s INT8 nodes and the
    StepRecord. The int8 values are stage-cached (``ptq_rounding``) under the graph, the
    INT8 node set, the calibration data and feeds, the ptq settings and the ptq source (and
    the input ranges for ``gptq_aware``; for ``gptq_sequential`` the Q/DQ graph its
    statistics run); the weights are rebuilt from them on the original per-channel scales,
    with the biases the activation-aware methods moved."""
    from quantkit.ptq.record import StepRecord
    from quantkit.ptq.sequential import sequential_round
    from quantkit.ptq.weight_rounding import (apply_rounding, input_hessians, round_weights,
                                              rounded_biases, rounded_int8, rounding_layers)

    model = state.graph.model
    layers, skipped = rounding_layers(model, plan.int8_nodes())
    method = state.options.weight_rounding
    aware = method != "gptq"  # statistics see the input Q/DQ: one entry per plan
    amax = dict(plan.activation_amax) if aware else None
    inputs = {"graph": state.graph.sha256, "nodes": sorted(plan.int8_nodes()), "amax": amax,
              "calib": ctx.splits.calib.sha256,
              "batch_size": ctx.settings.calibrator.batch_size,
              "max_length": ctx.settings.data.max_length, "code": _ptq_source_sha(),
              **ctx.feeds_key(), **ptq_key(ctx)}

    if method == "gptq_sequential":
        # keyed by the INT8 network the statistics see (its Q/DQ graph before rounding), not
        # by the plan: calibrators whose plans differ only where no INT8 node reads (e.g. the
        # input of an FP16 head) share one entry
        from quantkit.qdq.insert import insert_qdq

        quant, _ = insert_qdq(model, plan, target=ctx.settings.target, infos=state.graph.infos)
        inputs.update(amax=None, qdq_graph=hashlib.sha256(quant.SerializeToString()).hexdigest())

    def compute():
        if method == "gptq_sequential":
            rounded, rec = sequential_round(model, plan, layers, calib_batches(ctx),
                                            target=ctx.settings.target, skipped=skipped,
                                            runner_factory=_exact_runner(ctx),
                                            progress=ctx.settings.progress)
        else:
            hs = input_hessians(model, calib_batches(ctx)(), layers, input_amax=amax,
                                runner_factory=_runner(ctx, state))
            rounded, rec = round_weights(model, layers, hs, skipped=skipped)
        q = rounded_int8(model, rounded, list(rec.changes))
        b = rounded_biases(model, rounded, list(rec.changes))
        return ({"record": rec.to_dict(), "nodes": list(q), "biases": list(b)},
                {**{f"q{i}": q[n] for i, n in enumerate(q)},
                 **{f"b{i}": b[n] for i, n in enumerate(b)}})

    obj, arrays, _ = ctx.cached("ptq_rounding", inputs, compute)
    q = {n: arrays[f"q{i}"] for i, n in enumerate(obj["nodes"])}
    b = {n: arrays[f"b{i}"] for i, n in enumerate(obj.get("biases", []))}
    return apply_rounding(model, q, b), StepRecord(**obj["record"])


def _exact_runner(ctx: RunContext):
    """The runner of the sequential rounding's pruned graphs: the run's ORT settings, exact
    Q/DQ numerics (the statistics must not depend on the host's fused kernels)."""
    from quantkit.backends.runners import ort_runner

    return lambda m: ort_runner(ctx.settings.backend, m, name="ptq-sequential",
                                qdq_mode="exact", memory_arena=False)


def _runner(ctx: RunContext, state: PtqState):
    """The capture runner of the ptq passes: typed from the graph's one shape inference,
    the run's ORT settings."""
    from quantkit.backends.runners import ort_runner

    def runner(m, outs):
        return ort_runner(ctx.settings.backend, m, name="ptq-capture", extra_outputs=outs,
                          graph=state.graph)
    return runner


def _search(ctx: RunContext, state: PtqState, plan, ranges: dict):
    """The range search of one plan (quantkit.ptq.pipeline.refine_ranges) with the run's
    runner and the graph's one shape inference."""
    from quantkit.ptq.pipeline import refine_ranges

    n = ctx.settings.ptq.range_search_samples
    subset = lambda: ctx.batches(ctx.head(ctx.splits.calib, n),  # noqa: E731
                                 ctx.settings.calibrator.batch_size)
    searched, records = refine_ranges(state.graph.model, plan, ranges, subset, state.options,
                                      [], infos=state.graph.infos,
                                      runner_factory=_runner(ctx, state))
    return searched, list(records)


def _bias_means(ctx: RunContext, model, axes: dict, memo: dict) -> dict:
    """FP32 per-channel input means of ``axes`` over the calibration split (one pass per
    distinct INT8 set, shared through ``memo``)."""
    from quantkit.ptq.capture import channel_stats

    key = tuple(sorted(axes.items()))
    if key not in memo:
        memo[key] = channel_stats(model, calib_batches(ctx)(), axes)
    st = memo[key]
    return {t: st.mean(t) for t in axes}


def _ptq_source_sha() -> str:
    """sha256 of quantkit/ptq's source files: a changed technique never reads an old entry."""
    import hashlib
    from pathlib import Path

    import quantkit.ptq as pkg

    h = hashlib.sha256()
    for f in sorted(Path(pkg.__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _clip_ranges(before, after):
    """``after`` (searched amax) with its signed ranges (asymmetric targets) clipped to the
    searched amax, so the search reaches ort_cpu's zero-point Q/DQ too."""
    if after is before or not after.activation_range:
        return after
    rng = {}
    for t, (lo, hi) in after.activation_range.items():
        a = after.activation_amax.get(t)
        rng[t] = (lo, hi) if a is None or a == before.activation_amax.get(t) else \
            (max(lo, -a), min(hi, a))
    return dataclasses.replace(after, activation_range=rng)
