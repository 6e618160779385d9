"""The FP8 candidates' weights (issue 25): GPTQ on the FP8 E4M3 grid, kept where dev says so.

FP8 candidates are planned on the original graph with no INT8 ptq step (the FP8 source,
``run/fp8_source.py``): SmoothQuant, equalization and the range search answer INT8's coarse
grid. One step does help FP8: its weights are FP8 per tensor (TensorRT's FP8 weight
granularity, ``amax / 448``), so every weight carries a rounding error of up to 1/16 of its
own magnitude, and GPTQ (``ptq.weight_rounding.gptq_round(grid="fp8")``) compensates it in
the weights not yet rounded, against the node's FP32 input second moments on the calibration
split; on both shipped models it lowers the FP8 candidate's KL to FP32 (measured:
benchmarks/results/bert_int8.md and mobilenet_int8.md, "Figures behind the rules in
quantkit/run/").

``precision.fp8_weight_rounding``: ``nearest`` | ``gptq`` | ``auto`` (default). ``auto`` scores
both full-FP8 candidates of one FP8 calibrator's plan (:data:`FP8_CHOOSER`, else the first)
on all of dev by the recipe score (mean KL or 1 - mean cosine vs FP32,
:func:`quantkit.run.score.subset_score`; never test) and keeps GPTQ only when it
scores lower. All of dev, not the recipe trials' ``ptq.auto.subset``: it costs two
evaluations, and on a 512-snippet subset the two scores differed by less than their noise.
Not INT8's ``ptq.auto.calibrator`` (percentile): E4M3 has the dynamic range for the
tensor's max, and a clipped plan's error hides the weights' (both measured on bert_int8:
benchmarks/results/bert_int8.md). The decision holds for every FP8 calibrator; each candidate gets the rounded weights
of its own FP8 nodes only, so every node it leaves out of FP8 computes the original FP32
function. The statistics pass, the rounding (FP8 codes per
node) and the scores are stage-cached. The FP8 artifacts' ``weight_rounding`` step records
the method, the grid, both scores and each node's output error.

The mixed search's format fill (``run/format_fill.py``) builds its FP8 layers on the best
INT8 candidate's graph with the original weights: nearest rounding, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from quantkit.graph.model_graph import ModelGraph
from quantkit.precision.plan import Plan, Precision
from quantkit.ptq.graphutil import InitializerEditor, copy_model
from quantkit.ptq.pipeline import source_sha
from quantkit.ptq.step_record import StepRecord
from quantkit.ptq.weight_rounding import input_hessians, round_weights, rounding_layers
from quantkit.qdq.fp8 import FP8_DTYPE, fp8_weight_scale, quantize_fp8
from quantkit.qdq.realize import Realization, realize
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.quant_source import ptq_runners
from quantkit.run.score import subset_score

__all__ = ["FP8_CHOOSER", "Fp8Weights", "fp8_weights", "rounding_key"]

log = logging.getLogger(__name__)

#: the FP8 candidate whose plan ``auto`` decides on: the tensor's max, E4M3's own range
FP8_CHOOSER = "fp8.minmax"


@dataclass(frozen=True)
class Fp8Weights:
    """GPTQ-rounded FP8 codes per node (empty: nearest kept) and the step to record."""

    codes: Mapping[str, np.ndarray]
    step: StepRecord | None

    def model_for(self, model: onnx.ModelProto, plan: Plan) -> onnx.ModelProto | None:
        """``model`` with the rounded weights of ``plan``'s FP8 nodes (None: nothing to
        change, the artifact quantizes ``model`` itself)."""
        nodes = [n for n in plan.nodes_with(Precision.FP8) if n in self.codes]
        if not nodes:
            return None
        m = copy_model(model)
        ed = InitializerEditor(m)
        by_name = {n.name: n for n in m.graph.node}
        for name in nodes:
            node = by_name[name]
            w = ed.array(node.input[1])
            s = float(fp8_weight_scale(w, where=node.input[1]))
            q = np.asarray(self.codes[name]).view(FP8_DTYPE).astype(np.float64)
            ed.replace(node, 1, (q * s).astype(w.dtype))
        return m

    def steps(self) -> tuple[StepRecord, ...]:
        return () if self.step is None else (self.step,)


def fp8_weights(ctx: RunContext, graph: ModelGraph, plan: Plan,
                reference: Evaluation) -> Fp8Weights:
    """The FP8 weights of the candidates planned like ``plan`` on ``graph`` (module doc);
    ``reference``: the FP32 dev evaluation the ``auto`` scores compare against."""
    mode = ctx.settings.precision.fp8_weight_rounding
    if mode == "nearest":
        return Fp8Weights({}, None)
    codes, record = _rounded_codes(ctx, graph, plan)
    if not codes:
        return Fp8Weights({}, StepRecord.from_dict(record))
    if mode == "gptq":
        return Fp8Weights(codes, _with(record, chosen_by="setting"))
    scores = _dev_scores(ctx, graph, plan, Fp8Weights(codes, None), reference)
    keep = scores["gptq"] < scores["nearest"]
    log.info("fp8 weight rounding (auto, %d dev examples): nearest %.4g, gptq %.4g -> %s",
             scores["examples"], scores["nearest"], scores["gptq"],
             "gptq" if keep else "nearest")
    if keep:
        return Fp8Weights(codes, _with(record, chosen_by="dev", dev_scores=scores))
    kept = dict(record, changes={}, groups=[],
                skipped={**record["skipped"], **{n: "nearest scored lower on dev" for n in codes}})
    return Fp8Weights({}, _with(kept, chosen_by="dev", dev_scores=scores, kept="nearest"))


def _with(record: dict, **params) -> StepRecord:
    return StepRecord.from_dict(dict(record, params={**record["params"], **params}))


def rounding_key(ctx: RunContext, graph: ModelGraph, nodes: list[str]) -> dict:
    """The stage-cache key of the FP8 GPTQ rounding of ``nodes`` on ``graph``: the model, the
    calibration data and everything float-computed statistics depend on (numpy's BLAS
    kernel among them, ``RunContext.measured_key``)."""
    s = ctx.settings
    return {"model": graph.sha256, "calib": ctx.splits.calib.sha256,
            "batch_size": s.calibrator.batch_size, "nodes": nodes, "code": source_sha(),
            **ctx.feeds_key(), **ctx.measured_key()}


def _rounded_codes(ctx: RunContext, graph: ModelGraph, plan: Plan
                   ) -> tuple[dict[str, np.ndarray], dict]:
    """node -> FP8 codes (uint8) of its GPTQ-rounded weight, and the step's record dict."""
    s = ctx.settings
    nodes = sorted(plan.nodes_with(Precision.FP8))
    layers, skipped = rounding_layers(graph.model, nodes)

    def compute():
        hs = input_hessians(graph.model, ctx.batches(ctx.splits.calib, s.calibrator.batch_size),
                            layers, runner_factory=ptq_runners(ctx, graph).capture)
        rounded, rec = round_weights(graph.model, layers, hs, skipped=skipped, grid="fp8")
        ed = InitializerEditor(rounded)
        by_name = {n.name: n for n in rounded.graph.node}
        changed = list(rec.changes)
        arrays = {}
        for i, name in enumerate(changed):
            w = ed.array(by_name[name].input[1])
            arrays[f"q{i}"] = quantize_fp8(w, fp8_weight_scale(w, where=name)).view(np.uint8)
        return {"record": rec.to_dict(), "nodes": changed}, arrays

    obj, arrays, _ = ctx.cached("fp8_rounding", rounding_key(ctx, graph, nodes), compute)
    return {n: arrays[f"q{i}"] for i, n in enumerate(obj["nodes"])}, obj["record"]


def _dev_scores(ctx: RunContext, graph: ModelGraph, plan: Plan, rounded: Fp8Weights,
                reference: Evaluation) -> dict:
    """The recipe score of ``plan``'s full-FP8 candidate with nearest and with GPTQ weights
    on all of dev (stage-cached)."""
    s = ctx.settings
    dev = ctx.splits.dev
    key = {**rounding_key(ctx, graph, sorted(plan.nodes_with(Precision.FP8))),
           "dev": dev.sha256, "plan": plan.to_dict(),
           "remainder": s.precision.remainder, "scale_dtype": s.precision.qdq_scale_dtype}

    how = Realization(target=s.target, remainder=s.precision.remainder,
                      qdq_scale_dtype=s.precision.qdq_scale_dtype, int8_weights=True)

    def compute():
        ref = reference.logits
        out = {"examples": len(dev)}
        for label, model in (("nearest", graph.model),
                             ("gptq", rounded.model_for(graph.model, plan))):
            q = realize(model, plan, how, numerics="emulated",
                        infos=graph.infos if model is graph.model else None)
            out[label] = subset_score(ctx, q, dev, ref)
        return out, None

    obj, _, _ = ctx.cached("fp8_rounding_trial", key, compute)
    return dict(obj)
