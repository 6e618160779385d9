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

import onnx

from quantkit.precision.fp16_search import EvalResult, linear_evals_needed, pareto, search_fp16_set
from quantkit.precision.sensitivity import int8_node_tensors, proxy_scores, rank
from quantkit.record.search import SearchRecord
from quantkit.record.serde import decode, encode
from quantkit.run.artifact import Artifact, build_variant
from quantkit.run.context import RunContext, is_sweep_job
from quantkit.run.detection import is_detection
from quantkit.run.dev_halves import dev_halves
from quantkit.run.evaluation import (
    Evaluation,
    evaluate_artifact,
    evaluate_model,
    gallery_info,
    recall_gallery,
)
from quantkit.run.format_fill import fp8_fill
from quantkit.run.int8_source import Int8Source
from quantkit.run.sensitivity import (
    half_test,
    measure_sensitivity,
    powered_eval,
    proxy_layer_stats,
    quantized_graph,
    rest_in_fp32,
    variant_key,
)
from quantkit.run.stages.layerwise import LayerReport
from quantkit.run.verdicts import decision_value

__all__ = ["SearchOutcome", "declared_mixed", "search", "search_skip_reason"]

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
    search: SearchRecord  # the record's ``search`` section; read by nothing but :meth:`to_record`
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

    def to_record(self) -> SearchRecord:
        return self.search

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
    if settings.precision.search.in_sweeps or not is_sweep_job():
        return None
    return ("sweep job (python -m quantkit -m ...): the search runs once for the chosen "
            "setting; rerun it without -m, or set precision.search.in_sweeps=true")


def search(ctx: RunContext, artifacts: dict[str, Artifact], evaluations: dict[str, Evaluation],
           layers: LayerReport, reference: Evaluation, source: Int8Source
           ) -> SearchOutcome | None:
    """The search over the best INT8 candidate's layers (None without INT8 candidates);
    every variant is built the way that candidate was (``source``: its ptq graph and
    edits; nodes left out of INT8 compute the original FP32 function). The k=0 point is
    that candidate itself; every plan with an FP16 set keeps the edits of its plan refined
    with :attr:`Int8Source.variant_recipe` (gptq_aware where the recipe rounds
    sequentially), so under sequential rounding k=0 and k>=1 differ by more than the set."""
    s, graph = ctx.settings, ctx.graph
    int8 = {n: a for n, a in artifacts.items() if n.startswith("int8.")}
    if not int8:
        return None

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
        score = ("1 - mAP@[.5:.95] vs FP32's detections" if is_detection(ctx)
                 else "mean KL vs FP32")
        measure_note = (f"{'all' if len(top) == len(ranking) else 'top'} {len(top)} proxy "
                        f"layers re-ranked by measured damage ({what}; {score} on "
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
            ev = evaluate_model(ctx, "search", Path(tmp) / "model.search.onnx", reference=reference,
                                emulated=keep == "fp16", artifact_sha=obj["sha256"],
                                build=written, samples=False)
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
    search.update({"calibrator": best, "quantizable_layers": len(ranking), "ranking": ranking,
                   "proxy": {n: proxy[n] for n in ranking}, "measured": dict(measured),
                   "proxy_remeasured_tensors": remeasured, "dev_halves": halves.to_record(),
                   "measured_note": measure_note,
                   "measure_cost": measured.cost() if hasattr(measured, "steps") else {},
                   "pareto": pareto(search["evaluations"]),
                   "full_evals_linear": linear_evals_needed(ranking, found if result else None)})
    record = dataclasses.replace(decode(SearchRecord, encode(search), "search"),
                                 format_fill=fill.record)
    fp8_layers = [n for n in result.fp16_nodes if n in set(plan.nodes_with("fp8"))]
    return SearchOutcome(artifact=art, evaluation=ev, calibrator=best,
                         fp16_layers=[n for n in result.fp16_nodes if n not in fp8_layers],
                         plan_reasons={n: plan.decisions[n].reason for n in result.fp16_nodes},
                         search=record, fp8_layers=fp8_layers,
                         full_evals=record.full_evals, bound=record.bound)
