"""The search's measurements: each layer's measured damage (mean KL vs FP32 on a dev subset;
a detector: 1 - mAP vs FP32's detections, quantkit/run/score.py),
the per-layer proxy on a ptq-rewritten graph, the Q/DQ graph of a plan as its candidate is
built, and the search's reading of one dev evaluation (powered on test at the margin, with its
assurance)."""

from __future__ import annotations

import dataclasses
import logging

import onnx

from quantkit.backends.batched import run_split
from quantkit.compare.layer_diff import shared_tensors
from quantkit.compare.task import mean_kl
from quantkit.precision.fp16_search import EvalResult
from quantkit.precision.sensitivity import measured_scores, rank
from quantkit.qdq.realize import realize
from quantkit.run.artifact import Artifact
from quantkit.run.context import RunContext
from quantkit.run.detection import is_detection
from quantkit.run.evaluation import Evaluation
from quantkit.run.int8_source import Int8Source
from quantkit.run.layer_compare import compare_candidate
from quantkit.run.score import subset_score
from quantkit.run.verdicts import candidate_test
from quantkit.verdict.assurance import assurance
from quantkit.verdict.outcome import plan_power
from quantkit.verdict.policy import TestPolicy
from quantkit.verdict.power import required_agreement_size

__all__ = ["gate_test_size", "half_test", "measure_sensitivity", "powered_eval",
           "proxy_layer_stats", "quantized_graph", "rest_in_fp32", "variant_key"]

log = logging.getLogger(__name__)


def measure_sensitivity(ctx: RunContext, plan_for, top: list[str], ranking: list[str],
                        reference: Evaluation, *, quantized, variant_key: dict,
                        mode: str = "only", rest_fp32: bool) -> tuple[dict, list[str]]:
    """Measured damage (mean KL vs FP32 on a small dev subset; a detector: 1 - mAP vs FP32's
    detections) of each top layer: ``only``
    that layer INT8, or ``restore``: full INT8 minus that layer kept out.
    ``quantized(plan)``: the Q/DQ graph of a plan as the candidate is built (ptq edits on
    its INT8 nodes, the original constants elsewhere), with every node out of INT8 in FP32
    when ``rest_fp32`` (:func:`rest_in_fp32`) or in the remainder precision. The search's
    full evaluations always run the candidate as built. Returns the scores and the new
    ranking: the measured top layers first (most sensitive first), then the rest in proxy
    order. Each damage is stage-cached under ``variant_key`` (:func:`variant_key`: what the
    graph of a plan is built from), ``rest_fp32`` and the FP16 set."""
    s = ctx.settings
    n = min(s.precision.search.subset, len(ctx.splits.dev))
    sub = ctx.head(ctx.splits.dev, n)
    ref_logits = reference.logits[:n]
    key = {**variant_key, "dev": ctx.splits.dev.sha256, "n": n, "rest_fp32": rest_fp32,
           "batch": s.backend.batch_size, "qdq_mode": ctx.qdq_mode(),
           "reference": ref_logits, **ctx.feeds_key(), **ctx.measured_key()}

    def damage(fp16: frozenset[str]) -> float:
        def compute():
            if is_detection(ctx):  # 1 - mAP vs FP32's detections (run/score.py)
                return {"damage": subset_score(ctx, quantized(plan_for(fp16)), sub, ref_logits,
                                               name="sensitivity")}, None
            with ctx.runner(quantized(plan_for(fp16)), name="sensitivity") as r:
                logits = run_split(r, ctx.feeds, sub, output=ctx.model.output_name,
                                   batch_size=s.backend.batch_size, progress=False)
            return {"damage": float(mean_kl(ref_logits, logits))}, None

        obj, _, _ = ctx.cached("search_damage", {**key, "fp16": sorted(fp16)}, compute)
        return float(obj["damage"])

    if mode == "only":  # layers outside ``top`` stay out of INT8 too: one layer INT8 at a time
        rest = frozenset(ranking) - frozenset(top)
        scores = measured_scores(lambda fp16: damage(fp16 | rest), top, mode="only")
    else:
        scores = measured_scores(damage, top, mode="restore")
    head = rank(dict(scores), order=top)
    return scores, head + [n for n in ranking if n not in set(head)]


def rest_in_fp32(mode: str) -> bool:
    """Whether the sensitivity measurement of ``mode`` runs the nodes out of INT8 in FP32:
    ``only`` does (the remainder's own FP16 error is common to every measurement and orders
    of magnitude below one INT8 layer's, and an FP32 rest runs without the emulation's
    casts, about half the cost); ``restore`` keeps the remainder precision."""
    return mode == "only"


def variant_key(ctx: RunContext, source: Int8Source, base: Artifact, fallback: Artifact
                ) -> dict:
    """What the graph of a plan ``base`` minus an FP16 set is built from (the set aside):
    ``base``'s bytes (its ranges and ptq edits), the graph the plan names, the fallback
    (FP16 candidate) artifact whose decisions restored nodes take, the build settings."""
    p = ctx.settings.precision
    return {"base": base.sha256, "graph": source.graph.sha256, "fallback": fallback.sha256,
            "refined": base.refined is not None, "int8_weights": source.int8_weights,
            "variant_recipe": source.variant_recipe.key(),
            "target": ctx.settings.target, "remainder": p.remainder, "fp32_ops": p.fp32_ops,
            "qdq_scale_dtype": p.qdq_scale_dtype, "op_types": list(p.op_types)}


def quantized_graph(ctx: RunContext, source: Int8Source, base: Artifact, fallback, *,
                    emulate: bool = True):
    """``plan -> Q/DQ graph`` built the way ``base`` was (:meth:`Int8Source.restored_for`,
    :func:`quantkit.qdq.realize.realize`), FP16 emulated when ``emulate`` (else every node
    out of INT8 computes in FP32): what the sensitivity measurement runs."""
    refined = source.variant_refined(ctx, base.refined)
    how = source.realization(ctx)

    def build(plan):
        model = source.graph.model
        if refined is not None:
            variant = source.restored_for(refined, plan, fallback)
            model, plan = variant.model, variant.plan
        return realize(model, plan, how, numerics="emulated" if emulate else "fp32_rest",
                       infos=source.graph.infos if model is source.graph.model else None)
    return build


def proxy_layer_stats(ctx: RunContext, art: Artifact, source: Int8Source,
                      stats: dict[str, dict], tensors: list[str]
                      ) -> tuple[dict[str, dict], list[str]]:
    """``stats`` (the per-layer run's, keyed by the original graph's tensor names) plus the
    tensors of ``tensors`` it lacks, measured on ``art``'s own graph.

    A ptq rewrite adds tensors the original graph does not have (SmoothQuant's
    ``x__smoothed``) and rescales others (a LayerNormalization output with 1/s folded in:
    dropped from the comparison because its FP32 values differ from the original's). Their
    FP32 reference is the rewritten FP32 graph (``source.graph``: same function as the
    original, before the per-plan edits); the candidate is ``art`` as evaluated (FP16
    emulation when it has one), on the per-layer run's dev subset. Returns the merged stats
    and the tensors measured here (empty when nothing was missing: no extra run)."""
    missing = [t for t in dict.fromkeys(tensors) if t not in stats]
    if not source.is_rewritten or not missing:
        return dict(stats), []
    s = ctx.settings
    ref_proto = source.graph.model
    cand = art.emulated() if art.emulated is not None else onnx.load(art.path)
    missing = shared_tensors(ref_proto, cand, missing)
    if not missing:
        return dict(stats), []
    subset = list(range(min(s.compare.subset, len(ctx.splits.dev))))
    data = ctx.splits.dev.subset(subset)
    inputs = {"artifact": art.sha256, "reference": source.graph.sha256,
              "emulated": art.emulated is not None, "tensors": missing,
              "dev": ctx.splits.dev.sha256, "subset": subset, "batch": s.compare.batch_size,
              "qdq_mode": ctx.qdq_mode(), "amax": art.activation_amax, **ctx.feeds_key(),
              **ctx.measured_key()}

    def compute():
        with ctx.runner(ref_proto, name="proxy-fp32", extra_outputs=missing,
                        graph=source.graph) as ref:
            return compare_candidate(ctx, ref, cand, missing, data, art.activation_amax,
                                     name="proxy-candidate"), None

    extra, _, _ = ctx.cached("search_proxy_stats", inputs, compute)
    log.info("proxy: %d tensors of the ptq graph measured against its FP32 graph", len(extra))
    return {**stats, **extra}, list(extra)


def half_test(ctx: RunContext, ev: Evaluation, reference: Evaluation, rows, *,
              gallery: dict | None):
    """``ev``'s paired test against FP32 on ``rows`` of dev only (quantkit/run/dev_halves.py);
    ``gallery``: the recall@k gallery's ``gallery_info`` (None for logit outputs), drawn once
    by the caller."""
    return candidate_test(ctx, "dev", reference.logits, ev.logits, name=ev.name,
                          ref_gallery=reference.gallery, gallery=ev.gallery,
                          gallery_info=gallery, rows=rows)


def gate_test_size(gate: dict, *, policy: TestPolicy) -> int | None:
    """Test examples for ``policy.power`` to show the churn gate at ``policy.alpha``
    (``gate``: its dev ``SignoffTest.to_dict()``; ``point`` = agreement, ``threshold`` =
    1 - max_flip_rate), None when its dev agreement is not above the minimum."""
    deff = float(gate["groups"]["design_effect"]) if gate.get("groups") else 1.0
    return required_agreement_size(agreement=gate["point"], min_agreement=gate["threshold"],
                                   alpha=policy.alpha, power=policy.power, design_effect=deff,
                                   min_n=policy.min_n)


def _assurance(t: dict, *, n_test: int, alpha: float) -> float:
    """:func:`quantkit.verdict.assurance.assurance` of a test's dict (``SignoffTest.to_dict``,
    or the churn gate's)."""
    if any(t.get(k) is None for k in ("point", "low", "high", "threshold")):
        return 0.0  # no finite interval: nothing to promise
    return assurance(metric=t["metric"], point=t["point"], low=t["low"], high=t["high"],
                     level_alpha=t["alpha_one_sided"], threshold=t["threshold"],
                     n_dev=int(t["n"]), n_test=n_test, test_alpha=alpha)


def powered_eval(ctx: RunContext, ev: Evaluation, *, seconds: float, **extra):
    """The search's reading of one dev evaluation: ``PASS`` when its dev evidence gives the
    planned power (``verdict.power``) on the test split at the margin, at the one-sided
    alpha the sign-off tests at (what the family needs, not merely a dev PASS at whatever
    power: a candidate that passes dev by a hair would be INCONCLUSIVE on test), and its
    assurance reaches the same level (that power averaged over the dev estimate's
    uncertainty: a noisy dev estimate promises less; quantkit/verdict/assurance.py);
    ``FAIL`` when dev says FAIL; else ``INCONCLUSIVE``. The verdict and the power plan go
    into ``extra``."""
    policy = ctx.policy
    n_test = len(ctx.splits.test)
    plan = plan_power(ev.test, n_available=n_test, policy=policy)
    need, why = plan.n_required, plan.reason
    gate = ev.test.gate  # the churn gate (verdict.max_flip_rate): the candidate needs both
    if gate is not None and need is not None:
        need_gate = gate_test_size(gate, policy=policy)
        why += (f"; churn gate: flip rate {1 - gate['point']:.4f} (dev) against "
                f"verdict.max_flip_rate {1 - gate['threshold']:.4f} needs "
                + (f"{need_gate} test examples" if need_gate is not None else
                   "more test examples than any size gives"))
        need = None if need_gate is None else max(need, need_gate)
    sure = min(_assurance(t, n_test=n_test, alpha=policy.alpha)
               for t in [ev.test.to_dict(), *([gate] if gate is not None else [])])
    why += (f"; assurance {sure:.2f} (the power averaged over the dev estimate's own "
            f"uncertainty, quantkit/verdict/assurance.py; needs {policy.power:g})")
    powered = need is not None and need <= n_test and sure >= policy.power
    out = EvalResult.from_verdict(ev.verdict_dict(), seconds=seconds, power_plan=why,
                                  n_required=need, assurance=round(sure, 4), **extra)
    status = "PASS" if powered else ("FAIL" if out.status == "FAIL" else "INCONCLUSIVE")
    return dataclasses.replace(out, status=status)
