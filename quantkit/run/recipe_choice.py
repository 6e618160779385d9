"""``ptq.recipe=auto``: the post-training recipe chosen per model, on dev, by a low-noise score.

A greedy sequence over the declared dimensions, each tried only where the model has what it
needs (quantkit/settings/ptq_recipe.py):

1. SmoothQuant alpha (off / 0.5 / 0.8): where MatMul / Gemm inputs have outlier channels
   (max / median of the per-channel max-abs >= :data:`OUTLIER_RATIO` on the calibration data);
2. range-search error (tensor / row): where MatMul / Gemm read activations with a token axis;
3. activation-aware equalization (off / alpha 0.5): where Conv pairs with a Relu / ReLU6
   between exist (a positively homogeneous activation, checked per pair);
4. residual-stream scaling (off / alpha 0.5): where residual Adds join Conv outputs into a
   stream that only Convs and the Adds read (quantkit/ptq/stream_scaling.py; it lowers
   MobileNetV2's full-INT8 logit NMSE: benchmarks/results/mobilenet_int8.md);
5. weight rounding (nearest / gptq / gptq_aware / gptq_sequential), escalating: each only
   where the one before it was the dimension's best so far. ``gptq_aware`` is sequential
   rounding's objective in one pass (the least-squares target from the node's own input
   Q/DQ and the mean output it misses moved into the bias); ``gptq_sequential``, which costs
   a pass per layer, adds the sequence. On bert_int8 that objective is what hurts, so the
   one-pass trial saves the sequential one; on MobileNetV2 it helps (both measured:
   benchmarks/results/bert_int8.md, mobilenet_int8.md);
6. SmoothQuant alpha refined (kept / 0.9 / 0.95) on the recipe so far, where SmoothQuant is
   on: after GPTQ rounding absorbs the difficulty moved into the weights, a higher alpha can
   score lower than the first dimension's choice, which was scored with round-to-nearest
   weights (:data:`REFINED`);
7. bias correction (off / on).

The channel shift (``ptq.shift``, quantkit/ptq/shift.py) is not among them: on MiniLM its
safe form (no channel's second moment grows) shifts no tensor, and the plain midpoint form,
which helps without SmoothQuant, ruins it with SmoothQuant (measured:
benchmarks/results/bert_int8.md); pin it with ``ptq.recipe=custom ptq.shift=true``.

It starts from the ``generic`` recipe (per-tensor range search, int8 weights). For each
dimension in turn, every value is tried with the best recipe so far; the value with the
lowest score is kept (ties within a relative 1e-6: the value tried first, the simpler one),
and the runner-up goes on beside it through the next dimension when it scores within 5%
(:func:`greedy_choice`): a near-tie, whose order another host may flip, does not decide
which later steps are tried. Each trial is one
dev-subset evaluation of full INT8 (``ptq.auto.calibrator``'s plan, exact Q/DQ, FP16
remainder emulated): the mean KL(FP32 || INT8) for logits, 1 - mean cosine for embeddings,
on the first ``ptq.auto.subset`` dev examples; never the test split. At most
``ptq.auto.budget`` trials run (a budget in evaluations, never seconds); dimensions not
reached are recorded as such. Statistics passes are shared between trials through the stage
cache (calibration histograms per graph, channel statistics, rounding), and each trial's
score is stage-cached, so a warm rerun reads the whole choice. Every trial and its score go
into the record (``ptq.choice``) and the report.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from quantkit.ptq.equalization import find_pairs
from quantkit.ptq.pipeline import channel_summary, source_sha
from quantkit.ptq.smoothquant import smoothable_inputs
from quantkit.ptq.stream_scaling import stream_tensors
from quantkit.qdq.realize import realize
from quantkit.run.context import RunContext
from quantkit.run.evaluation import Evaluation
from quantkit.run.fp16_range import Fp16Range
from quantkit.run.int8_source import Int8Source, rewrite_for, source_for
from quantkit.run.plans import plan_for_ranges
from quantkit.run.quant_source import calib_data, ptq_memo, ptq_runners
from quantkit.run.recipe_trial import RecipeChoice, RecipeTrial
from quantkit.run.scope import QuantScope
from quantkit.run.score import subset_score
from quantkit.settings.ptq_recipe import Recipe, named_recipes

__all__ = ["choose_recipe", "dimensions", "greedy_choice", "OUTLIER_RATIO",
           "REFINED", "REFINED_ALPHAS", "RUNNER_UP_RTOL"]

log = logging.getLogger(__name__)

#: max / median of a MatMul input's per-channel max-abs from which SmoothQuant is tried
#: (MiniLM's LayerNorm outputs: 20-60; a CNN head's pooled features: about 3)
OUTLIER_RATIO = 8.0


def dimensions(ctx: RunContext, scope: QuantScope) -> list[tuple[str, list[dict]]]:
    """The dimensions auto tries on this model, in order, each as (name, [field changes]);
    the first value of each is the one the generic recipe has."""
    model = ctx.graph.model
    ops = {t.op_type for t in scope.targets}
    out: list[tuple[str, list[dict]]] = []
    if ops & {"MatMul", "Gemm"}:
        if _has_outliers(ctx, model):
            out.append(("smoothquant", [{"smoothquant_alpha": None},
                                        {"smoothquant_alpha": 0.5},
                                        {"smoothquant_alpha": 0.8}]))
        if _reads_token_axis(ctx, scope):
            out.append(("range_search_error", [{"range_search_error": "tensor"},
                                               {"range_search_error": "row"}]))
    if "Conv" in ops and any(kind in ("relu", "relu6") for *_, kind in find_pairs(model)):
        out.append(("equalization", [{"equalization": "off", "equalization_alpha": None},
                                     {"equalization": "per_channel_clip",
                                      "equalization_alpha": 0.5}]))
    if "Conv" in ops and stream_tensors(model):
        out.append(("stream_scaling", [{"stream_alpha": None}, {"stream_alpha": 0.5}]))
    out.append(("weight_rounding", [{"weight_rounding": "nearest"},
                                    {"weight_rounding": "gptq"},
                                    {"weight_rounding": "gptq_aware"},
                                    {"weight_rounding": "gptq_sequential"}]))
    if out[0][0] == "smoothquant":
        out.append((REFINED, [{}] + [{"smoothquant_alpha": a} for a in REFINED_ALPHAS]))
    out.append(("bias_correction", [{"bias_correction": False}, {"bias_correction": True}]))
    return out


def _has_outliers(ctx: RunContext, model) -> bool:
    """Some MatMul / Gemm input has outlier channels on the calibration data (stage-cached
    channel statistics, the pass SmoothQuant reads anyway)."""
    groups = smoothable_inputs(model)
    if not groups:
        return False
    absmax = channel_summary(model, {t: -1 for t in groups}, calib_data(ctx),
                             runners=ptq_runners(ctx), memo=ptq_memo(ctx)).absmax
    ratios = [float(a.max() / max(np.median(a), 1e-12)) for a in absmax.values() if a.size]
    log.info("recipe auto: MatMul inputs' outlier ratio (max / median channel) up to %.1f",
             max(ratios, default=0.0))
    return max(ratios, default=0.0) >= OUTLIER_RATIO


def _reads_token_axis(ctx: RunContext, scope: QuantScope) -> bool:
    """A MatMul / Gemm in scope reads an activation of rank >= 3 ([batch, tokens, K])."""
    infos = ctx.graph.infos
    for t in scope.targets:
        if t.op_type in ("MatMul", "Gemm"):
            for a in t.activations:
                info = infos.get(a)
                if info is not None and info.shape is not None and len(info.shape) >= 3:
                    return True
    return False


def choose_recipe(ctx: RunContext, scope: QuantScope, fp16: Fp16Range,
                  reference: Evaluation) -> RecipeChoice:
    """The greedy choice of the module doc, on the dev reference's first examples."""

    cfg = ctx.settings.ptq.auto
    n = min(cfg.subset, len(ctx.splits.dev))
    kind = {"embedding": "1 - mean cosine", "detection": "1 - mAP@[.5:.95] vs FP32's "
            "detections"}.get(ctx.model.output_kind, "mean KL")
    score = _scorer(ctx, scope, fp16, reference, n)
    (_, _, best), trials, skipped = greedy_choice(
        dimensions(ctx, scope), score, ("generic", named_recipes()["generic"]),
        budget=cfg.budget)
    rewritten = rewrite_for(ctx, best)
    log.info("recipe auto: chose %s after %d evaluations", best.describe(), len(trials))
    return RecipeChoice(name=f"auto: {best.describe()}", recipe=best, rewritten=rewritten,
                        trials=tuple(trials), score_kind=kind, budget=cfg.budget,
                        skipped=tuple(skipped))


Option = tuple[RecipeTrial, str, Recipe]  # (trial, label, recipe)


def greedy_choice(dims: list[tuple[str, list[dict]]],
                  score: Callable[[str, Recipe, str], RecipeTrial], start: tuple[str, Recipe],
                  *, budget: int) -> tuple[Option, list[RecipeTrial], list[str]]:
    """The module doc's greedy sequence from ``start`` (label, recipe), with a runner-up:
    after each dimension the best option goes on, and so does the second best when its
    score is within :data:`RUNNER_UP_RTOL` of the best (two paths, not one, through the next
    dimension; never more). A near-tie then does not decide which later steps are tried: on
    bert_int8 the per-tensor and row-wise range searches score within 1.5% of each other, in
    an order that differed between an AVX-512 and an AVX2 host, while GPTQ after the
    row-wise search scores 35% below either. Values are tried value by value across the
    paths; an :data:`ESCALATING` value only on a path whose previous value is the best
    option of the dimension so far. ``score(label, recipe, dimension)`` evaluates a recipe;
    each distinct recipe is scored once, at most ``budget`` of them. Returns the best option,
    the trials in the order they ran, and the values not tried, with why."""
    scored_by_key: dict[str, RecipeTrial] = {}

    def trial(label: str, recipe: Recipe, dim: str) -> RecipeTrial:
        key = repr(sorted(recipe.key().items()))
        if key not in scored_by_key:
            scored_by_key[key] = score(label, recipe, dim)
        return scored_by_key[key]

    paths: list[Option] = [(trial(start[0], start[1], "start"), *start)]
    skipped: list[str] = []
    for name, values in dims:
        options: list[Option] = []
        previous: dict[int, Option] = {}
        for v, change in enumerate(values):
            for p, (base_trial, base_label, base) in enumerate(paths):
                refines_nothing = name == REFINED and base.smoothquant_alpha is None
                recipe = base if refines_nothing else base.with_(**change)
                if recipe.key() == base.key():
                    previous[p] = (base_trial, base_label, recipe)
                    options.append(previous[p])
                    continue
                if name in ESCALATING and v > 1 and (
                        p not in previous or previous[p][0].score is None
                        or _lowest(options)[1] != previous[p][1]):
                    skipped.append(f"{name}={_value(change)} after {base_label}: the "
                                   f"cheaper {_value(values[v - 1])} was not the best")
                    continue
                if len(scored_by_key) >= budget:
                    skipped.append(f"{name}={_value(change)}: budget of {budget} evaluations "
                                   "spent")
                    continue
                label = f"{base_label}+{name}={_value(change)}"
                previous[p] = (trial(label, recipe, name), label, recipe)
                options.append(previous[p])
        scored = [o for o in options if o[0].score is not None]
        if scored:
            first = _lowest(scored)
            rest = [o for o in scored if o[2].key() != first[2].key()]
            second = _lowest(rest) if rest else None
            paths = [first] + ([second] if second is not None and second[0].score
                               <= first[0].score * (1.0 + RUNNER_UP_RTOL) else [])
        best = paths[0]
        log.info("recipe auto: %s -> %s (score %s)%s", name, best[2].describe(),
                 f"{best[0].score:.4g}" if best[0].score is not None else "n/a",
                 f"; {paths[1][2].describe()} ({paths[1][0].score:.4g}) goes on beside it"
                 if len(paths) > 1 else "")
    return paths[0], list(scored_by_key.values()), skipped


#: a second path goes on when its score is within this relative distance of the best
RUNNER_UP_RTOL = 0.05

#: the dimension after weight rounding: SmoothQuant alpha raised, only on a path where
#: SmoothQuant is on (its first value keeps the path's alpha). The first dimension scores alpha
#: with round-to-nearest weights, where the difficulty moved into the weights costs most;
#: after GPTQ absorbs it, a higher alpha can win (bert_int8's MiniLM with the row-wise search
#: and GPTQ: benchmarks/results/bert_int8.md, "Figures behind the rules in quantkit/run/").
REFINED = "smoothquant_refine"
REFINED_ALPHAS = (0.9, 0.95)

#: dimensions whose values escalate: a value is tried only when the one before it is the
#: dimension's best so far (sequential rounding, minutes per model, only where its one-pass
#: objective, gptq_aware, beat one-pass GPTQ)
ESCALATING = ("weight_rounding",)

#: scores within this relative distance are a tie, kept by order (the simpler value first):
#: a choice must not hang on the float noise that differs between CPUs (about 1e-7)
TIE_RTOL = 1e-6


def _lowest(options: list) -> tuple:
    """The option with the lowest score; near-ties (:data:`TIE_RTOL`) go to the earlier."""
    best = options[0]
    for o in options[1:]:
        if o[0].score < best[0].score * (1.0 - TIE_RTOL) - 1e-15:
            best = o
    return best


def _value(change: dict) -> str:
    return ",".join(f"{v}" for v in change.values())


def _plan_settings(precision) -> str:
    """What of ``precision`` shapes a full-INT8 candidate (the search's settings do not)."""
    return repr(dataclasses.replace(precision, search=None))


def _scorer(ctx: RunContext, scope: QuantScope, fp16: Fp16Range, reference: Evaluation,
            n: int) -> Callable[[str, Recipe, str], RecipeTrial]:
    """``score(label, recipe, dimension)``: the recipe's full-INT8 candidate on the first
    ``n`` dev examples against FP32 (module doc), stage-cached under everything that made it."""
    s = ctx.settings
    sub = ctx.head(ctx.splits.dev, n)
    ref = reference.logits[:n]
    base = {"model": ctx.graph.sha256, "dev": ctx.splits.dev.sha256, "n": n,
            "calib": ctx.splits.calib.sha256, "calibrator": s.ptq.auto.calibrator,
            "calibrators": list(s.calibrator.methods), "target": s.target,
            "precision": _plan_settings(s.precision), "samples": s.ptq.range_search_samples,
            "code": [source_sha(), _own_sha()], **ctx.feeds_key(), **ctx.measured_key()}

    def score(label: str, recipe: Recipe, dim: str) -> RecipeTrial:
        t0 = time.perf_counter()

        def compute():
            value, note = _evaluate(ctx, scope, fp16, recipe, sub, ref)
            return {"score": value, "note": note}, None

        obj, _, hit = ctx.cached("ptq_recipe_trial", {**base, "recipe": recipe.key()}, compute)
        seconds = 0.0 if hit else time.perf_counter() - t0
        log.info("recipe auto: %s (%s): score %s%s", label, recipe.describe(),
                 "n/a" if obj["score"] is None else f"{obj['score']:.4g}",
                 " [cached]" if hit else "")
        return RecipeTrial(label=label, recipe=recipe, dimension=dim, score=obj["score"],
                           examples=n, seconds=seconds, note=obj["note"])
    return score


def _evaluate(ctx: RunContext, scope: QuantScope, fp16: Fp16Range, recipe: Recipe, sub,
              ref: np.ndarray) -> tuple[float | None, str]:
    """Full INT8 of ``recipe`` (one calibrator's plan) on the dev subset ``sub``: its score
    against the FP32 outputs ``ref`` and a note (rewrites dropped by their proofs)."""
    rewritten = rewrite_for(ctx, recipe)
    notes = [f"{p.step} dropped: {p.reason}" for p in rewritten.proofs if not p.kept]
    source = source_for(ctx, scope, fp16, "trial", recipe, rewritten)
    model = _full_int8(ctx, source, fp16)
    if model is None:
        return None, "; ".join(notes + ["no INT8 node"])
    return subset_score(ctx, model, sub, ref), "; ".join(notes)


def _full_int8(ctx: RunContext, source: Int8Source, fp16: Fp16Range):
    """The Q/DQ graph (FP16 remainder emulated) of ``ptq.auto.calibrator``'s plan on
    ``source``, refined by its recipe and restored where it is not INT8, built the way the
    artifacts stage builds its candidates; None without an INT8 node. ``fp16``: the
    original graph's check."""
    ranges = source.ranges(ctx, progress=False)
    pick = ctx.settings.ptq.auto.calibrator
    plan = source.plan(ctx, ranges[pick] if pick in ranges else next(iter(ranges.values())))
    if not plan.int8_nodes():
        return None
    refined = source.refined_for(ctx, plan, ranges, plan_for_ranges(ctx, None, fp16))
    graph = source.graph
    return realize(refined.model, refined.plan, source.realization(ctx), numerics="emulated",
                   infos=graph.infos if refined.model is graph.model else None)


def _own_sha() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
