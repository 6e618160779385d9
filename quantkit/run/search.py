"""Stage "search": keep the fewest INT8 layers in the remainder precision whose dev evidence
gives the planned power on the test split at the margin (sensitivity ranking + galloping /
bisection over full evaluations; :func:`powered_eval`): the sign-off then has the power it
plans for, instead of a dev PASS by a hair that test leaves INCONCLUSIVE.

Ranking: the one-pass proxy from the full-INT8 per-layer comparison (free: it reuses the
debug run), re-ranked by measured damage (each layer's, on the graph the candidates are
built from) when full INT8 is not powered. Each search step is one full evaluation with a
verdict; the full-INT8 evaluation (k = 0) is reused. Sets with FP16 layers are chosen on
one half of dev and the chosen set is confirmed on the other (quantkit/run/dev_halves.py:
the winner's curse of reading a chosen set on the data it was chosen on). Every evaluation
is in the record with its power plan; ``pareto`` lists the FP16-layer count against the
metric."""

from __future__ import annotations

import dataclasses
import functools
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from quantkit.run.artifacts import Artifact, build_variant
from quantkit.run.context import RunContext
from quantkit.run.dev_halves import dev_halves
from quantkit.run.evaluation import (Evaluation, evaluate, evaluate_artifact, gallery_info,
                                     recall_gallery)
from quantkit.run.format_fill import fp8_fill
from quantkit.run.layerwise import LayerReport

if TYPE_CHECKING:
    import onnx

    from quantkit.run.quant_source import QuantSource
    from quantkit.verdict.policy import TestPolicy

__all__ = ["SearchOutcome", "search_mixed", "search_skip_reason", "measure_sensitivity",
           "proxy_layer_stats", "variant_key"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchOutcome:
    """The mixed candidate (artifact + evaluation + what the search kept) and the search's
    own record (ranking, proxy, evaluations, bound...)."""

    artifact: Artifact
    evaluation: Evaluation
    calibrator: str
    fp16_layers: list[str]
    plan_reasons: dict[str, str]
    search: dict  # the record's ``search`` section; read by nothing but :meth:`to_record`
    fp8_layers: list[str] = dataclasses.field(default_factory=list)
    full_evals: int = 0  # full evaluations the search paid for
    bound: int = 0  # its O(log L) bound on them

    @property
    def kept_layers(self) -> int:
        """How many layers the search kept out of INT8 (in FP16, or FP8 by the fill)."""
        return len(self.fp16_layers) + len(self.fp8_layers)

    @property
    def quantized_layers(self) -> int:
        """How many nodes of the mixed candidate are INT8 or FP8 (0: it is the fp16 one)."""
        return len(self.artifact.plan.quantized_nodes())

    def to_record(self) -> dict:
        return dict(self.search)

    def candidate_record(self) -> dict:
        return {**self.evaluation.to_record(), **self.artifact.to_record(),
                "calibrator": self.calibrator, "fp16_layers": list(self.fp16_layers),
                **({"fp8_layers": list(self.fp8_layers)} if self.fp8_layers else {}),
                "plan_reasons": dict(self.plan_reasons)}


def declared_mixed(outcome: SearchOutcome | None) -> Evaluation | None:
    """The mixed candidate's dev evaluation when it belongs in the sign-off family, else
    None: it does when the search kept at least one layer out of INT8 (with none it is the
    best INT8 candidate again) and left at least one quantized (with none it computes what
    the fp16 candidate does, and declaring it would spend a look of the test split on the
    same function twice)."""
    if outcome is None or outcome.kept_layers == 0:
        return None
    if outcome.quantized_layers == 0:
        log.info("mixed candidate not declared: the search kept all %d layers out of INT8, "
                 "so it is the fp16 candidate", outcome.kept_layers)
        return None
    return outcome.evaluation


def search_skip_reason(settings) -> str | None:
    """Why this run skips the sensitivity search, or None.

    A Hydra multirun job (``-m``) compares one setting against its siblings on full INT8;
    searching in every job would repeat the most expensive stage once per swept value. The
    search runs once, for the setting the sweep picks (``precision.search.in_sweeps=true``
    keeps it in every job).
    """
    from quantkit.run.context import is_sweep_job

    if settings.precision.search.in_sweeps or not is_sweep_job():
        return None
    return ("sweep job (python -m quantkit -m ...): the search runs once for the chosen "
            "setting; rerun it without -m, or set precision.search.in_sweeps=true")


def measure_sensitivity(ctx: RunContext, plan_for, top: list[str], ranking: list[str],
                        reference: Evaluation, *, quantized, variant_key: dict,
                        mode: str = "only", rest_fp32: bool) -> tuple[dict, list[str]]:
    """Measured damage (mean KL vs FP32 on a small dev subset) of each top layer: ``only``
    that layer INT8, or ``restore``: full INT8 minus that layer kept out.
    ``quantized(plan)``: the Q/DQ graph of a plan as the candidate is built (ptq edits on
    its INT8 nodes, the original constants elsewhere), with every node out of INT8 in FP32
    when ``rest_fp32`` (:func:`rest_in_fp32`) or in the remainder precision. The search's
    full evaluations always run the candidate as built. Returns the scores and the new
    ranking: the measured top layers first (most sensitive first), then the rest in proxy
    order. Each damage is stage-cached under ``variant_key`` (:func:`variant_key`: what the
    graph of a plan is built from), ``rest_fp32`` and the FP16 set."""
    from quantkit.backends.batched import run_split
    from quantkit.compare.task import mean_kl
    from quantkit.precision.sensitivity import measured_scores, rank

    s = ctx.settings
    n = min(s.precision.search.subset, len(ctx.splits.dev))
    sub = ctx.head(ctx.splits.dev, n)
    ref_logits = reference.logits[:n]
    key = {**variant_key, "dev": ctx.splits.dev.sha256, "n": n, "rest_fp32": rest_fp32,
           "batch": s.backend.batch_size, "qdq_mode": ctx.qdq_mode(),
           "reference": ref_logits, **ctx.feeds_key(), **ctx.measured_key()}

    def damage(fp16: frozenset[str]) -> float:
        def compute():
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


def variant_key(ctx: RunContext, source: QuantSource, base: Artifact, fallback: Artifact
                ) -> dict:
    """What the graph of a plan ``base`` minus an FP16 set is built from (the set aside):
    ``base``'s bytes (its ranges and ptq edits), the graph the plan names, the fallback
    (FP16 candidate) artifact whose decisions restored nodes take, the build settings."""
    p = ctx.settings.precision
    return {"base": base.sha256, "graph": source.graph.sha256, "fallback": fallback.sha256,
            "refined": base.refined is not None, "int8_weights": source.recipe.int8_weights,
            "variant_recipe": source.variant_recipe.key(),
            "target": ctx.settings.target, "remainder": p.remainder, "fp32_ops": p.fp32_ops,
            "qdq_scale_dtype": p.qdq_scale_dtype, "op_types": list(p.op_types)}


def quantized_graph(ctx: RunContext, source: QuantSource, base: Artifact, fallback, *,
                    emulate: bool = True):
    """``plan -> Q/DQ graph`` built the way ``base`` was (:meth:`QuantSource.restored_for`),
    FP16 emulated when the remainder is FP16 and ``emulate`` (else every node out of INT8
    computes in FP32): what the sensitivity measurement runs."""
    from quantkit.qdq.casts import emulate_fp16
    from quantkit.qdq.insert import insert_qdq

    s = ctx.settings
    refined = source.variant_refined(ctx, base.refined)
    fp16 = emulate and s.precision.remainder == "fp16"

    def build(plan):
        model = source.graph.model
        if refined is not None:
            variant = source.restored_for(refined, plan, fallback)
            model, plan = variant.model, variant.plan
        edited, _ = insert_qdq(model, plan, target=s.target,
                               infos=source.graph.infos if model is source.graph.model else None)
        return emulate_fp16(edited, plan) if fp16 else edited
    return build


def proxy_layer_stats(ctx: RunContext, art: Artifact, source: QuantSource,
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
    import onnx

    from quantkit.compare.layer_diff import shared_tensors
    from quantkit.run.layerwise import compare_candidate

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
    from quantkit.run.verdicts import candidate_test

    return candidate_test(ctx, "dev", reference.logits, ev.logits, name=ev.name,
                          ref_gallery=reference.gallery, gallery=ev.gallery,
                          gallery_info=gallery, rows=rows)


def gate_test_size(gate: dict, *, policy: TestPolicy) -> int | None:
    """Test examples for ``policy.power`` to show the churn gate at ``policy.alpha``
    (``gate``: its dev ``SignoffTest.to_dict()``; ``point`` = agreement, ``threshold`` =
    1 - max_flip_rate), None when its dev agreement is not above the minimum."""
    from quantkit.verdict.power import required_agreement_size

    deff = float(gate["groups"]["design_effect"]) if gate.get("groups") else 1.0
    return required_agreement_size(agreement=gate["point"], min_agreement=gate["threshold"],
                                   alpha=policy.alpha, power=policy.power, design_effect=deff,
                                   min_n=policy.min_n)


def _assurance(t: dict, *, n_test: int, alpha: float) -> float:
    """:func:`quantkit.verdict.assurance.assurance` of a test's dict (``SignoffTest.to_dict``,
    or the churn gate's)."""
    from quantkit.verdict.assurance import assurance

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
    from quantkit.precision.fp16_search import EvalResult
    from quantkit.verdict.outcome import plan_power

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


def search_mixed(ctx: RunContext, artifacts: dict[str, Artifact],
                 evaluations: dict[str, Evaluation], layers: LayerReport,
                 reference: Evaluation, source: QuantSource) -> SearchOutcome | None:
    """The search over the best INT8 candidate's layers (None without INT8 candidates);
    every variant is built the way that candidate was (``source``: its ptq graph and
    edits; nodes left out of INT8 compute the original FP32 function). The k=0 point is
    that candidate itself; every plan with an FP16 set keeps the edits of its plan refined
    with :attr:`QuantSource.variant_recipe` (gptq_aware where the recipe rounds
    sequentially), so under sequential rounding k=0 and k>=1 differ by more than the set."""
    from quantkit.precision.fp16_search import EvalResult, linear_evals_needed, pareto, search_fp16_set
    from quantkit.precision.sensitivity import int8_node_tensors, proxy_scores, rank

    s, graph = ctx.settings, ctx.graph
    int8 = {n: a for n, a in artifacts.items() if n.startswith("int8.")}
    if not int8:
        return None
    from quantkit.run.verdicts import decision_value

    best = max(int8, key=lambda n: decision_value(ctx, evaluations[n]))
    base_plan, best_eval = int8[best].plan, evaluations[best]
    graph = source.graph  # the graph the INT8 plans name
    fallback = artifacts["fp16"].plan
    nodes = base_plan.int8_nodes()
    outs, ins = int8_node_tensors(graph.model, nodes, infos=graph.infos)
    graph_inputs = {i.name for i in graph.model.graph.input}
    needed = [t for t in [*outs.values(), *(u for ts in ins.values() for u in ts)]
              if t not in graph_inputs]
    stats, remeasured = proxy_layer_stats(ctx, int8[best], source, layers.layers[best], needed)
    proxy = proxy_scores(stats, outs, ins)
    ranking = rank(proxy, order=nodes)
    cfg = s.precision.search
    keep = s.precision.remainder  # fp16 (TensorRT) or fp32 (an FP32 remainder, ort_cpu)

    def plan_for(fp16: frozenset[str], why: dict[str, str] | None = None):
        plan = base_plan
        for n in sorted(fp16):
            plan = plan.with_precision([n], keep, f"kept {keep.upper()} by search: "
                                                  f"{(why or {}).get(n, '')}")
        return plan

    vkey = variant_key(ctx, source, int8[best], artifacts["fp16"])
    measured, measure_note = {}, "not needed: full INT8's dev evidence gives the planned power"
    base_eval = powered_eval(ctx, best_eval, seconds=best_eval.eval_seconds,
                             reused=best)
    if base_eval.status != "PASS" and cfg.measure_top > 0:
        top = ranking[:cfg.measure_top]
        measured, ranking = measure_sensitivity(
            ctx, plan_for, top, ranking, reference,
            quantized=quantized_graph(ctx, source, int8[best], fallback,
                                      emulate=not rest_in_fp32(cfg.measure_mode)),
            variant_key=vkey, mode=cfg.measure_mode, rest_fp32=rest_in_fp32(cfg.measure_mode))
        what = ("each layer alone INT8, the rest FP32" if cfg.measure_mode == "only"
                else "each layer alone kept out of INT8")
        measure_note = (f"{'all' if len(top) == len(ranking) else 'top'} {len(top)} proxy "
                        f"layers re-ranked by measured damage ({what}; mean KL vs FP32 on "
                        f"{cfg.subset} dev examples)")
    reasons = {n: f"sensitivity rank {i + 1} of {len(ranking)}, output SQNR "
                  f"{proxy[n].get('sqnr_out_db') or float('nan'):.1f} dB in full INT8 ({best})"
                  + (f", measured damage {measured[n]:.3g}" if n in measured else "")
               for i, n in enumerate(ranking)}
    log.info("sensitivity search over %d INT8 layers of %s", len(ranking), best)

    halves = dev_halves(ctx)
    read: dict[frozenset[str], tuple[Evaluation, float]] = {}  # each set's dev evaluation
    gallery = gallery_info(ctx, recall_gallery(ctx)) if halves.split else None

    def on_rows(fp16: frozenset[str], rows) -> EvalResult:
        """The search's reading of the set's dev evaluation on ``rows`` of dev (None: all)."""
        ev, seconds = read[fp16]
        if rows is not None:
            ev = dataclasses.replace(ev, test=half_test(ctx, ev, reference, rows,
                                                        gallery=gallery))
        return powered_eval(ctx, ev, seconds=seconds, accuracy=ev.metrics.get("accuracy"))

    def full_eval(fp16: frozenset[str]) -> EvalResult:
        if not fp16:
            return base_eval  # full INT8: no choice among sets, read on all of dev
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=ctx.run_dir) as tmp:
            @functools.cache
            def build() -> Artifact:  # written once, and only when a cache misses
                return build_variant(ctx, "search", int8[best], plan_for(fp16, reasons),
                                     source, fallback, out_dir=Path(tmp))

            def written() -> tuple[str, onnx.ModelProto | None]:
                art = build()
                return art.path, art.emulated() if art.emulated is not None else None

            obj, _, _ = ctx.cached("search_variant", {**vkey, "fp16": sorted(fp16)},
                                   lambda: ({"sha256": build().sha256}, None))
            # the kept nodes are in the remainder precision: FP16 ones make an emulation
            ev = evaluate(ctx, "search", Path(tmp) / "model.search.onnx", reference=reference,
                          emulated=keep == "fp16", artifact_sha=obj["sha256"], build=written)
        read[fp16] = (ev, time.perf_counter() - t0)
        return on_rows(fp16, halves.selection)

    result = search_fp16_set(ranking, full_eval, max_full_evals=cfg.max_full_evals,
                             max_seconds=cfg.max_minutes * 60 if cfg.max_minutes else None,
                             prune=cfg.prune,
                             confirm=(functools.partial(on_rows, rows=halves.confirmation)
                                      if halves.split else None))
    found = result.fp16_set
    plan = plan_for(found, reasons)
    art = build_variant(ctx, "mixed", int8[best], plan, source, fallback)
    ev = evaluate_artifact(ctx, art, reference)
    fill = fp8_fill(ctx, int8[best], plan, list(result.fp16_nodes), artifacts, evaluations,
                    reference, source, fallback,
                    powered=lambda e: powered_eval(ctx, e, seconds=0.0))
    if fill.artifact is not None:  # the kept layers FP8 runs faster than FP16 are FP8
        art, ev, plan = fill.artifact, fill.evaluation, fill.artifact.plan
    search = result.to_dict()
    if fill.record is not None:
        search["format_fill"] = fill.record
    search.update({"calibrator": best, "quantizable_layers": len(ranking), "ranking": ranking,
                   "proxy": {n: proxy[n] for n in ranking}, "measured": dict(measured),
                   "proxy_remeasured_tensors": remeasured, "dev_halves": halves.to_record(),
                   "measured_note": measure_note,
                   "measure_cost": measured.cost() if hasattr(measured, "steps") else {},
                   "pareto": pareto(search["evaluations"]),
                   "full_evals_linear": linear_evals_needed(ranking, found if result else None)})
    fp8_layers = [n for n in result.fp16_nodes if n in set(plan.nodes_with("fp8"))]
    return SearchOutcome(artifact=art, evaluation=ev, calibrator=best,
                         fp16_layers=[n for n in result.fp16_nodes if n not in fp8_layers],
                         plan_reasons={n: plan.decisions[n].reason for n in result.fp16_nodes},
                         search=search, fp8_layers=fp8_layers,
                         full_evals=int(search["full_evals"]), bound=int(search["bound"]))
