"""The post-training steps of one recipe, in run order: the one implementation that runs,
tests and benchmarks call.

    data = CalibData(batches=lambda: calib_feeds, subset=lambda: calib_feeds[:4], key={...})
    rewritten = rewrite(model, recipe, data, output="logits")       # before calibration
    ... calibrate rewritten.model (one streaming pass) -> ranges; build_plan -> plan ...
    refined = refine(rewritten.model, plan, ranges, recipe, data, target="tensorrt")
    insert_qdq(refined.model, refined.plan, int8_weights=recipe.int8_weights)

``rewrite`` applies equalization, channel shift then SmoothQuant, each proven to keep the FP32 function on
the calibration data (:mod:`quantkit.ptq.proof`; a step that fails is dropped, with its
reason). ``refine`` runs range search, weight rounding and bias correction for one INT8
plan. Every statistics pass goes through ``memo(kind, key, compute) -> (obj, arrays)``: the
run passes its stage cache (``quantkit/run/stages/ptq.py``), tests and benchmarks the default
:func:`no_memo`; the computed values are the same either way. ``runners``: how the passes
open ONNX Runtime (the run's backend settings; defaults: ORT CPU).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from quantkit.backends.runners import ort_runner
from quantkit.precision.plan import Plan
from quantkit.ptq.proof import DEFAULT_TOLERANCE, StepProof, prove_rewrite
from quantkit.ptq.step_record import StepRecord, groups_of
from quantkit.settings.ptq_recipe import Recipe

Batches = Callable[[], Iterable[Mapping[str, np.ndarray]]]
Memo = Callable[[str, dict, Callable[[], tuple[dict, dict]]], tuple[dict, dict]]

__all__ = ["CalibData", "ChannelSummary", "channel_summary", "Rewritten", "Refined", "Runners",
           "no_memo", "rewrite", "refine", "restored_for", "source_sha"]


def no_memo(kind: str, key: dict, compute: Callable[[], tuple[dict, dict]]
            ) -> tuple[dict, dict]:
    """Compute every time (tests, benchmarks)."""
    del kind, key
    obj, arrays = compute()
    return obj, arrays or {}


def source_sha() -> str:
    """sha256 of quantkit/ptq's source files: a changed technique never reads an old entry."""
    from pathlib import Path

    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def model_sha(model: onnx.ModelProto) -> str:
    return hashlib.sha256(model.SerializeToString()).hexdigest()


@dataclass(frozen=True)
class CalibData:
    """``batches()``: a fresh pass over the calibration split; ``subset()``: the small
    subset range search captures (memory O(subset x tensors)); ``key``: what identifies
    both in a memo key (data hash, feeds, batch size)."""

    batches: Batches
    subset: Batches
    key: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Runners:
    """``capture(model, outputs)``: an FP32 runner returning ``outputs`` too; ``exact(model)``:
    a runner with exact Q/DQ numerics (the sequential rounding's pruned graphs); ``fp32(model)``:
    the proof's runner. None: ONNX Runtime CPU defaults."""

    capture: Callable | None = None
    exact: Callable | None = None
    fp32: Callable | None = None

    def fp32_runner(self) -> Callable:
        if self.fp32 is not None:
            return self.fp32
        return lambda m: ort_runner(None, m, name="ptq-proof", optimization_level="basic")


@dataclass(frozen=True)
class Rewritten:
    """The graph that gets calibrated (``model``; the input itself when no step applied),
    the rewrites kept (``steps``) and every rewrite tried with its proof (``proofs``)."""

    model: onnx.ModelProto
    steps: tuple[StepRecord, ...] = ()
    proofs: tuple[StepProof, ...] = ()


@dataclass(frozen=True)
class Refined:
    """One INT8 plan after range search, weight rounding and bias correction: the refined
    ``plan``, the FP32 graph its Q/DQ goes into (``model``) and the StepRecords."""

    plan: Plan
    model: onnx.ModelProto
    records: tuple[StepRecord, ...] = ()


# ---------------------------------------------------------------------------------------
# before calibration


@dataclass(frozen=True)
class ChannelSummary:
    """Per-channel statistics of tensors on the calibration data: max-abs (SmoothQuant,
    equalization, the outlier test), min, max and mean (the channel shift)."""

    absmax: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    mean: dict[str, np.ndarray]


def channel_summary(model: onnx.ModelProto, axes: Mapping[str, int], data: CalibData, *,
                    runners: Runners = Runners(), memo: Memo = no_memo) -> ChannelSummary:
    """One FP32 pass over ``data.batches()`` (channel of each tensor on its ``axes`` entry),
    memoized under ``ptq_channel_stats``: the one statistics pass the rewrites and the
    recipe choice read."""
    from quantkit.ptq.capture import channel_stats

    key = {"model": model_sha(model), "axes": sorted(axes.items()), **data.key,
           "code": source_sha()}
    kinds = ("absmax", "low", "high", "mean")

    def compute():
        st = channel_stats(model, data.batches(), axes, runner_factory=runners.capture)
        names = sorted(st.absmax)
        got = {"absmax": st.absmax, "low": st.low, "high": st.high,
               "mean": {t: st.mean(t) for t in names}}
        return {"tensors": names}, {f"{k}{i}": got[k][t] for k in kinds
                                    for i, t in enumerate(names)}

    obj, arrays = memo("ptq_channel_stats", key, compute)
    return ChannelSummary(*({t: arrays[f"{k}{i}"] for i, t in enumerate(obj["tensors"])}
                            for k in kinds))


def rewrite(model: onnx.ModelProto, recipe: Recipe, data: CalibData, *, output: str,
            logits: bool = True, runners: Runners = Runners(), memo: Memo = no_memo,
            proof_batches: Batches | None = None,
            tolerance: float = DEFAULT_TOLERANCE) -> Rewritten:
    """Equalization, stream scaling, channel shift, then SmoothQuant on a copy of ``model``
    (as ``recipe`` says), each kept
    only when :func:`~quantkit.ptq.proof.prove_rewrite` shows the compared ``output`` (class
    ``logits`` or not) unchanged within ``tolerance`` on ``proof_batches`` (default:
    ``data.subset``)."""
    from quantkit.ptq.equalization import equalize_pairs, pair_inputs
    from quantkit.ptq.shift import shift_activations
    from quantkit.ptq.smoothquant import smooth_activations, smoothable_inputs
    from quantkit.ptq.stream_scaling import scale_streams, stream_tensors

    steps: list[StepRecord] = []
    proofs: list[StepProof] = []
    check = proof_batches or data.subset

    def keep(step: StepRecord, before: onnx.ModelProto, after: onnx.ModelProto):
        if not step.changes:
            steps.append(step)
            return before
        proof = prove_rewrite(step.name, before, after, check(), output=output,
                              runner_factory=runners.fp32_runner(), logits=logits,
                              tolerance=tolerance)
        proofs.append(proof)
        if proof.kept:
            steps.append(step)
            return after
        steps.append(dataclasses.replace(step, changes={}, groups=(),
                                         skipped={**step.skipped, "*": proof.reason}))
        return before

    cur = model
    if recipe.equalization != "off":
        absmax = None
        if recipe.equalization_alpha is not None:
            tensors = pair_inputs(cur)
            absmax = (channel_summary(cur, {t: 1 for t in tensors}, data, runners=runners,
                                      memo=memo).absmax if tensors else {})
        after, rec = equalize_pairs(cur, relu6=recipe.equalization,
                                    iterations=recipe.equalization_iterations,
                                    activation_absmax=absmax,
                                    alpha=recipe.equalization_alpha or 0.5)
        cur = keep(rec, cur, after)
    if recipe.stream_alpha is not None:
        tensors = stream_tensors(cur)
        if tensors:
            absmax = channel_summary(cur, {t: 1 for t in tensors}, data, runners=runners,
                                     memo=memo).absmax
            after, rec = scale_streams(cur, absmax, alpha=recipe.stream_alpha)
            cur = keep(rec, cur, after)
    if recipe.shift:
        groups = smoothable_inputs(cur)
        if groups:
            st = channel_summary(cur, {t: -1 for t in groups}, data, runners=runners, memo=memo)
            after, rec = shift_activations(cur, st.low, st.high, st.mean)
            cur = keep(rec, cur, after)
    if recipe.smoothquant_alpha is not None:
        groups = smoothable_inputs(cur)
        if groups:
            absmax = channel_summary(cur, {t: -1 for t in groups}, data, runners=runners,
                                     memo=memo).absmax
            after, rec = smooth_activations(cur, absmax, alpha=recipe.smoothquant_alpha,
                                            min_outlier_ratio=recipe.smoothquant_min_outlier_ratio)
            cur = keep(rec, cur, after)
    return Rewritten(model=cur, steps=tuple(steps), proofs=tuple(proofs))


# ---------------------------------------------------------------------------------------
# per INT8 plan

def refine(model: onnx.ModelProto, plan: Plan, ranges: Mapping[str, Any], recipe: Recipe,
           data: CalibData, *, target: str = "tensorrt", infos=None,
           runners: Runners = Runners(), memo: Memo = no_memo, graph_sha: str | None = None,
           progress: bool = False, search_errors: dict | None = None) -> Refined:
    """Range search (over every calibrator's amax in ``ranges``: {calibrator: Ranges}),
    weight rounding, then bias correction of ``plan``'s INT8 nodes on ``model`` (the
    calibrated graph). ``infos``: its tensor facts (``ModelGraph.infos``) when known;
    ``graph_sha``: its sha256 when known (memo keys); ``search_errors``: a dict kept across
    the calls for several plans (the calibrators'), where the range search keeps the layer
    errors it measured (``range_search.search_ranges``' ``memo``), per graph and data."""
    if not plan.int8_nodes():
        return Refined(plan=plan, model=model)
    code = source_sha()
    sha = graph_sha or model_sha(model)
    base = {"graph": sha, **data.key, "code": code}
    records: list[StepRecord] = []
    if recipe.range_search:
        errors = None
        if search_errors is not None:
            errors = search_errors.setdefault(
                repr((sha, sorted(data.key.items()), recipe.range_search_error)), {})
        plan, rec = _searched(model, plan, ranges, recipe, data, base, infos, runners, memo,
                              errors)
        records.append(rec)
    edited = model
    if recipe.weight_rounding != "nearest":
        edited, rec = _rounded(model, plan, recipe, data, base, target, infos, runners, memo,
                               progress)
        records.append(rec)
    if recipe.bias_correction:
        edited, rec = _bias_corrected(model, edited, plan, data, base, runners, memo)
        records.append(rec)
    return Refined(plan=plan, model=edited, records=tuple(records))


def restored_for(refined: Refined, plan: Plan, *, calibrated: onnx.ModelProto,
                 rewritten: Rewritten, original: onnx.ModelProto, fallback: Plan) -> Refined:
    """``refined`` for ``plan``, whose INT8 nodes are a subset of ``refined.plan``'s (the
    search's mixed plans): the per-plan edits (rounding, bias) of ``plan``'s INT8 nodes kept,
    every other group of edits put back as in ``calibrated`` (the graph before them), then
    every rewrite group (equalization, SmoothQuant) with no INT8 node of ``plan`` put back as
    in ``original`` (:func:`quantkit.ptq.restore.revert_groups`): every node ``plan`` does
    not quantize computes the original FP32 function, constants a step added included.
    ``fallback``: the plan of the original graph whose decisions restored nodes take."""
    from quantkit.ptq.restore import revert_groups

    keep = plan.int8_nodes()
    # the node groups the per-plan steps (rounding, bias correction) and the rewrites edited
    model, _ = revert_groups(refined.model, calibrated, groups_of(refined.records), keep)
    model, restored = revert_groups(model, original, groups_of(rewritten.steps), keep)
    if restored:
        plan = plan.on_nodes([n.name for n in model.graph.node], fallback)
    return Refined(plan=plan, model=model, records=refined.records)


def _searched(model, plan: Plan, ranges, recipe: Recipe, data: CalibData, base: dict, infos,
              runners: Runners, memo: Memo, errors: dict | None
              ) -> tuple[Plan, StepRecord]:
    from quantkit.ptq.capture import capture_tensors
    from quantkit.ptq.range_search import candidates_from_ranges, int8_inputs, search_ranges

    cands = candidates_from_ranges(ranges)
    key = {**base, "plan": plan.to_dict(), "candidates": cands,
           "search": [recipe.range_search_grid, recipe.range_search_combine,
                      recipe.range_search_error]}

    def compute():
        samples = capture_tensors(model, list(data.subset()),
                                  list(int8_inputs(model, plan, infos=infos)),
                                  runner_factory=runners.capture)
        amax, rec = search_ranges(model, plan, samples, cands, grid=recipe.range_search_grid,
                                  combine=recipe.range_search_combine,
                                  error=recipe.range_search_error, infos=infos,
                                  memo=errors)
        return {"activation_amax": amax, "record": rec.to_dict()}, {}

    obj, _ = memo("ptq_range_search", key, compute)
    searched = dataclasses.replace(plan, activation_amax=obj["activation_amax"])
    return _clip_ranges(plan, searched), StepRecord.from_dict(obj["record"])


def _rounded(model, plan: Plan, recipe: Recipe, data: CalibData, base: dict, target: str,
             infos, runners: Runners, memo: Memo, progress: bool
             ) -> tuple[onnx.ModelProto, StepRecord]:
    """Rounded weights (and the biases the activation-aware methods moved) of ``plan``'s
    INT8 nodes. The memo entry holds int8 values + biases (4x smaller than floats), keyed
    by what the statistics see: the INT8 node set (gptq), plus the ranges of the rounded
    nodes' inputs (gptq_aware: calibrators' plans that differ only elsewhere share one), or
    the Q/DQ graph the sequential pass runs (gptq_sequential: plans that differ only where
    no INT8 node reads share one entry)."""
    from quantkit.ptq.sequential import sequential_round
    from quantkit.ptq.weight_rounding import (
        apply_rounding,
        input_hessians,
        round_weights,
        rounded_biases,
        rounded_int8,
        rounding_layers,
    )

    method = recipe.weight_rounding
    layers, skipped = rounding_layers(model, plan.int8_nodes())
    key = {**base, "method": method, "nodes": sorted(plan.int8_nodes())}
    if method == "gptq_aware":  # the ranges its statistics read: the rounded nodes' inputs
        key["amax"] = {l.data: plan.activation_amax.get(l.data) for l in layers}
    if method == "gptq_sequential":
        from quantkit.qdq.insert import insert_qdq

        quant, _ = insert_qdq(model, plan, target=target, infos=infos)
        key["qdq_graph"] = model_sha(quant)
        del quant

    def compute():
        if method == "gptq_sequential":
            rounded, rec = sequential_round(model, plan, layers, data.batches, target=target,
                                            skipped=skipped, runner_factory=runners.exact,
                                            progress=progress)
        else:
            amax = plan.activation_amax if method == "gptq_aware" else None
            hs = input_hessians(model, data.batches(), layers, input_amax=amax,
                                runner_factory=runners.capture)
            rounded, rec = round_weights(model, layers, hs, skipped=skipped)
        q = rounded_int8(model, rounded, list(rec.changes))
        b = rounded_biases(model, rounded, list(rec.changes))
        return ({"record": rec.to_dict(), "nodes": list(q), "biases": list(b)},
                {**{f"q{i}": q[n] for i, n in enumerate(q)},
                 **{f"b{i}": b[n] for i, n in enumerate(b)}})

    obj, arrays = memo("ptq_rounding", key, compute)
    q = {n: arrays[f"q{i}"] for i, n in enumerate(obj["nodes"])}
    b = {n: arrays[f"b{i}"] for i, n in enumerate(obj.get("biases", []))}
    return apply_rounding(model, q, b), StepRecord.from_dict(obj["record"])


def _bias_corrected(model, edited, plan: Plan, data: CalibData, base: dict, runners: Runners,
                    memo: Memo) -> tuple[onnx.ModelProto, StepRecord]:
    """Bias correction from the FP32 per-channel means of the INT8 nodes' inputs (one pass
    over the calibration split per INT8 node set, shared by the calibrators' plans)."""
    from quantkit.ptq.bias_correction import correct_bias, input_channel_axes
    from quantkit.ptq.capture import channel_stats

    axes = input_channel_axes(model, plan.int8_nodes())
    key = {**base, "axes": sorted(axes.items())}

    def compute():
        st = channel_stats(model, data.batches(), axes, runner_factory=runners.capture)
        names = sorted(axes)
        return {"tensors": names}, {f"m{i}": st.mean(t) for i, t in enumerate(names)}

    obj, arrays = memo("ptq_bias_means", key, compute) if axes else ({"tensors": []}, {})
    means = {t: arrays[f"m{i}"] for i, t in enumerate(obj["tensors"])}
    return correct_bias(edited, plan.int8_nodes(), means)


def _clip_ranges(before: Plan, after: Plan) -> Plan:
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
