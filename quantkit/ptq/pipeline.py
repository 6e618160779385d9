"""The ptq steps in run order, from settings-like options; what the run stages call.

    opts = PtqOptions(smoothquant_alpha=0.8, range_search=True, bias_correction=True)
    model, records = before_calibration(model, calib_batches, opts)       # FP32 unchanged
    ... calibrate ``model`` (one streaming pass) -> ranges; build_plan -> plan ...
    plan, records = refine_ranges(model, plan, ranges, calib_subset, opts, records)
    model, records = before_qdq(model, plan, calib_batches, opts, records)
    insert_qdq(model, plan, target=..., int8_weights=opts.int8_weights)

``calib_batches``: a callable returning a fresh iterable of calibration feed dicts (each
step that needs statistics makes one extra FP32 pass); ``calib_subset``: the same for the
small subset range search captures (memory O(subset x tensor sizes)).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from quantkit.precision.plan import Plan
from quantkit.ptq.bias_correction import correct_bias, input_channel_axes
from quantkit.ptq.capture import capture_tensors, channel_stats
from quantkit.ptq.equalization import equalize_pairs, pair_inputs
from quantkit.ptq.range_search import candidates_from_ranges, int8_inputs, search_ranges
from quantkit.ptq.record import StepRecord
from quantkit.ptq.sequential import sequential_round
from quantkit.ptq.smoothquant import smooth_activations, smoothable_inputs
from quantkit.ptq.weight_rounding import input_hessians, round_weights, rounding_layers

Batches = Callable[[], Iterable[Mapping[str, np.ndarray]]]

__all__ = ["PtqOptions", "before_calibration", "refine_ranges", "before_qdq"]


@dataclass(frozen=True)
class PtqOptions:
    """``smoothquant_alpha``: None = off; ``equalization``: off / per_channel_clip / skip
    (ReLU6 handling); the rest switch a step on. Defaults: everything off."""

    smoothquant_alpha: float | None = None
    smoothquant_min_outlier_ratio: float = 0.0
    equalization: str = "off"
    equalization_iterations: int = 2
    #: None: weight-only CLE scales; a number: activation-aware scales with this alpha
    equalization_alpha: float | None = None
    range_search: bool = False
    range_search_grid: int = 16
    range_search_combine: str = "widest"
    range_search_error: str = "tensor"  # tensor | row (ptq/range_search.py)
    bias_correction: bool = False
    weight_rounding: str = "nearest"  # nearest | gptq | gptq_aware | gptq_sequential
    int8_weights: bool = True


def before_calibration(model: onnx.ModelProto, calib_batches: Batches, opts: PtqOptions
                       ) -> tuple[onnx.ModelProto, list[StepRecord]]:
    """Equalization then SmoothQuant on the FP32 graph (its FP32 function is unchanged)."""
    records = []
    if opts.equalization != "off":
        absmax = None
        if opts.equalization_alpha is not None:
            tensors = pair_inputs(model)
            absmax = channel_stats(model, calib_batches(), {t: 1 for t in tensors}).absmax \
                if tensors else {}
        model, rec = equalize_pairs(model, relu6=opts.equalization,
                                    iterations=opts.equalization_iterations,
                                    activation_absmax=absmax,
                                    alpha=opts.equalization_alpha or 0.5)
        records.append(rec)
    if opts.smoothquant_alpha is not None:
        groups = smoothable_inputs(model)
        if groups:
            st = channel_stats(model, calib_batches(), {t: -1 for t in groups})
            model, rec = smooth_activations(model, st.absmax, alpha=opts.smoothquant_alpha,
                                            min_outlier_ratio=opts.smoothquant_min_outlier_ratio)
            records.append(rec)
    return model, records


def refine_ranges(model: onnx.ModelProto, plan: Plan, ranges: Mapping[str, object],
                  calib_subset: Batches, opts: PtqOptions, records: list[StepRecord], *,
                  infos=None, runner_factory=None) -> tuple[Plan, list[StepRecord]]:
    """Range search over every calibrator's amax (``ranges``: {calibrator: Ranges}).
    ``infos``: the model's tensor facts when known (``ModelGraph.infos``);
    ``runner_factory(model, extra_outputs)``: the runner that captures the samples."""
    if not opts.range_search or not plan.int8_nodes():
        return plan, records
    samples = capture_tensors(model, list(calib_subset()),
                              list(int8_inputs(model, plan, infos=infos)),
                              runner_factory=runner_factory)
    amax, rec = search_ranges(model, plan, samples, candidates_from_ranges(ranges),
                              grid=opts.range_search_grid, combine=opts.range_search_combine,
                              error=opts.range_search_error, infos=infos)
    return dataclasses.replace(plan, activation_amax=amax), records + [rec]


def before_qdq(model: onnx.ModelProto, plan: Plan, calib_batches: Batches, opts: PtqOptions,
               records: list[StepRecord], *, target: str = "tensorrt"
               ) -> tuple[onnx.ModelProto, list[StepRecord]]:
    """Weight rounding then bias correction of the plan's INT8 nodes (edits the graph
    that gets quantized). ``target``: the Q/DQ realization the sequential rounding sees."""
    if not plan.int8_nodes():
        return model, records
    if opts.weight_rounding == "gptq_sequential":
        layers, skipped = rounding_layers(model, plan.int8_nodes())
        model, rec = sequential_round(model, plan, layers, calib_batches, target=target,
                                      skipped=skipped)
        records = records + [rec]
    elif opts.weight_rounding in ("gptq", "gptq_aware"):
        layers, skipped = rounding_layers(model, plan.int8_nodes())
        aware = opts.weight_rounding == "gptq_aware"
        stats = input_hessians(model, calib_batches(), layers,
                               input_amax=plan.activation_amax if aware else None)
        model, rec = round_weights(model, layers, stats, skipped=skipped)
        records = records + [rec]
    if not opts.bias_correction:
        return model, records
    axes = input_channel_axes(model, plan.int8_nodes())
    st = channel_stats(model, calib_batches(), axes)
    model, rec = correct_bias(model, plan.int8_nodes(), {t: st.mean(t) for t in axes})
    return model, records + [rec]
