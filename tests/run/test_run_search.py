"""Stage search on the tiny world: the mixed candidate from typed results (not the record)."""

from __future__ import annotations

import numpy as np

from quantkit.record.serde import encode
from quantkit.run.stages.search import search as search_mixed, search_skip_reason


def test_search_builds_and_evaluates_the_mixed_candidate(ctx, artifacts, evaluations, layers,
                                                          reference, source):
    out = search_mixed(ctx, artifacts, evaluations, layers, reference, source)
    best = max((n for n in artifacts if n.startswith("int8.")),
               key=lambda n: evaluations[n].metric("accuracy"))
    assert out.calibrator == best and encode(out.search)["calibrator"] == best
    assert encode(out.search)["full_evals"] <= encode(out.search)["bound"]
    assert out.artifact.name == "mixed" and (ctx.run_dir / "model.mixed.onnx").is_file()
    cand = out.candidate_record()
    assert cand["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE")
    assert cand["artifact_sha256"] == out.artifact.sha256
    assert set(out.fp16_layers) <= set(artifacts[best].plan.int8_nodes())


def test_no_int8_candidate_no_search(ctx, artifacts, evaluations, layers, reference, source):
    only = {"fp16": artifacts["fp16"]}
    assert search_mixed(ctx, only, evaluations, layers, reference, source) is None


def test_plain_runs_search(ctx):
    assert search_skip_reason(ctx.settings) is None


def test_proxy_scores_the_inputs_ptq_renamed(ctx, tmp_path):
    """SmoothQuant quantizes ``x__smoothed``, a tensor the original graph (whose names the
    per-layer run uses) does not have: the proxy measures it on the ptq graph instead of
    scoring that input as noise-free (issue 16)."""
    import dataclasses

    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.stages.layerwise import layerwise as compare_layers
    from quantkit.run.evaluation import evaluate_artifact
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.run.scope import quant_scope
    from quantkit.settings import PtqConfig

    ptq = PtqConfig(recipe="custom", smoothquant_alpha=0.8, range_search=False,
                    int8_weights=True)
    c = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, ptq=ptq),
                            run_dir=tmp_path)
    overflow = check_fp16_range(c)
    sources = apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c))
    source = sources.int8
    arts = build_artifacts(c, calibrate(c, sources), overflow, sources)
    ref = evaluate_reference(c)
    evs = {n: evaluate_artifact(c, a, ref) for n, a in arts.items()}
    out = search_mixed(c, arts, evs, compare_layers(c, source.scope, arts), ref, source)
    graph_inputs = {i.name for i in ctx.graph.model.graph.input}
    rows = encode(out.search)["proxy"]
    assert any(t.endswith("__smoothed") for row in rows.values() for t in row["inputs_missing"]
               + list(encode(out.search).get("proxy_remeasured_tensors", [])))
    for node, row in rows.items():
        assert not [t for t in row["inputs_missing"] if t not in graph_inputs], (node, row)
        assert row["noise_in"] > 0.0, (node, row)  # INT8 upstream noise reaches the input
    assert any(t.endswith("__smoothed") for t in encode(out.search)["proxy_remeasured_tensors"])


def _plans_without(ctx, art):
    """fp16 set -> ``art``'s plan with those nodes in the remainder precision."""
    def plan_for(fp16):
        plan = art.plan
        for n in sorted(fp16):
            plan = plan.with_precision([n], ctx.settings.precision.remainder, "test")
        return plan
    return plan_for


def test_measured_sensitivity_only_mode_scores_each_layer_alone_int8(ctx, artifacts, evaluations,
                                                                    reference, source):
    """mode=only: the baseline keeps every ranked layer out of INT8 (layers outside the
    measured top too), each step puts exactly one layer back; INT8 damage is positive."""
    from quantkit.run.sensitivity import measure_sensitivity, quantized_graph

    art = artifacts["int8.minmax"]
    nodes = sorted(art.plan.int8_nodes())
    plan_for = _plans_without(ctx, art)
    quantized = quantized_graph(ctx, source, art, artifacts["fp16"].plan)
    scores, ranking = measure_sensitivity(ctx, plan_for, nodes[:1], nodes, reference,
                                          quantized=quantized, variant_key={"test": 1},
                                          mode="only", rest_fp32=False)
    assert scores.mode == "only" and sorted(ranking) == nodes
    base, *steps = scores.steps
    assert base["fp16_set"] == [nodes[0]] and [s["fp16_set"] for s in steps] == [[]]
    assert scores[nodes[0]] > 0


def test_only_mode_measures_each_layer_against_an_fp32_rest(ctx, artifacts, reference, source):
    """mode=only runs the layer alone INT8 with every other node in FP32 (no FP16 emulation:
    the remainder's own error is common to all steps): the baseline, no layer INT8, is the
    FP32 function itself (damage 0 up to kernel order), below the FP16-emulated baseline."""
    from onnx import TensorProto

    from quantkit.run.sensitivity import measure_sensitivity, quantized_graph

    art = artifacts["int8.minmax"]
    nodes = sorted(art.plan.int8_nodes())
    plan_for = _plans_without(ctx, art)
    baselines = {}
    for emulate in (False, True):
        quantized = quantized_graph(ctx, source, art, artifacts["fp16"].plan, emulate=emulate)
        halves = [n for n in quantized(plan_for(frozenset(nodes))).graph.node
                  if n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT16]
        assert bool(halves) == emulate
        scores, _ = measure_sensitivity(ctx, plan_for, nodes[:1], nodes, reference,
                                        quantized=quantized,
                                        variant_key={"test": 2}, mode="only",
                                        rest_fp32=not emulate)
        baselines[emulate] = scores.steps[0]["damage"]
    assert baselines[False] < 1e-9 < baselines[True]


def test_the_search_plans_power_for_the_churn_gate_too():
    """A candidate needs both its metric test and the churn gate (verdict.max_flip_rate) to
    PASS on test: the search's power plan sizes the gate as well (run/stages/search.py)."""
    from quantkit.run.sensitivity import gate_test_size
    from quantkit.verdict import TestPolicy

    policy = TestPolicy(alpha=0.0125, power=0.8, min_n=100)
    gate = {"point": 0.986, "threshold": 0.98, "groups": None}
    n = gate_test_size(gate, policy=policy)
    assert 4000 < n < 5500  # normal approximation at one-sided 0.0125: ~4,730 examples
    # closer to the bound needs more; at or below the bound no size will do
    assert gate_test_size({**gate, "point": 0.984}, policy=policy) > 6389
    assert gate_test_size({**gate, "point": 0.98}, policy=policy) is None
    # clustered examples: the design effect scales the size
    grouped = {**gate, "groups": {"design_effect": 2.0}}
    assert gate_test_size(grouped, policy=policy) in (2 * n - 1, 2 * n, 2 * n + 1)


def test_a_warm_search_builds_and_runs_nothing(ctx, artifacts, layers, reference, source,
                                               tmp_path, monkeypatch):
    """The search's per-layer damages, its variants' hashes and their evaluations are
    stage-cached: a second search on the same cache runs no session and builds no variant
    but the chosen one, and reads the same evaluations."""
    import dataclasses

    import quantkit.run.evaluation as evaluation
    import quantkit.run.sensitivity as sensitivity
    import quantkit.run.stages.search as search
    from quantkit.cache import StageCache
    from quantkit.run.evaluation import evaluate_artifact

    s = ctx.settings
    s = dataclasses.replace(
        s, verdict=dataclasses.replace(s.verdict, max_flip_rate=1e-6),  # nothing is powered
        precision=dataclasses.replace(s.precision, search=dataclasses.replace(
            s.precision.search, measure_top=3, max_full_evals=3)))
    warm = dataclasses.replace(ctx, settings=s, cache=StageCache(tmp_path / "cache"),
                               run_dir=tmp_path / "run")
    warm.run_dir.mkdir()
    evs = {n: evaluate_artifact(warm, a, reference) for n, a in artifacts.items()}
    first = search_mixed(warm, artifacts, evs, layers, reference, source)
    stages = {p.parent.name for p in (tmp_path / "cache").glob("*/*/")}
    assert {"search_damage", "search_variant"} <= stages, stages
    assert encode(first.search)["measured"] and encode(first.search)["full_evals"] >= 2

    built: list[str] = []
    real_build = search.build_variant

    def counting_build(ctx, name, *a, **k):
        built.append(name)
        return real_build(ctx, name, *a, **k)

    def refuse(*a, **k):
        raise AssertionError("a warm search ran a session")
    monkeypatch.setattr(search, "build_variant", counting_build)
    monkeypatch.setattr(evaluation, "_evaluate", refuse)
    monkeypatch.setattr(sensitivity, "run_split", refuse)  # the damages' sessions
    second = search_mixed(warm, artifacts, evs, layers, reference, source)
    assert built == ["mixed"]  # the chosen candidate's file; no search variant
    def timeless(evals):
        return [{k: v for k, v in e.items() if k != "seconds"} for e in evals]
    assert timeless(encode(second.search)["evaluations"]) == timeless(encode(first.search)["evaluations"])
    assert encode(second.search)["measured"] == encode(first.search)["measured"]
    assert second.fp16_layers == first.fp16_layers



def test_the_mixed_candidate_reuses_the_search_evaluation_of_its_set(ctx, artifacts,
                                                                      reference, tmp_path):
    """On ONNX Runtime an evaluation is keyed by the artifact's bytes, not by the plan (read
    only by backend=trt's engine check): the mixed candidate, built from the FP16 set the
    search evaluated as a step (no plan), reads that evaluation back instead of running dev
    again; a different artifact is still run."""
    import dataclasses

    from quantkit.cache import StageCache
    from quantkit.run.evaluation import evaluate_artifact
    from quantkit.run.evaluation import evaluate_model as evaluate

    assert ctx.settings.backend.name == "ort"
    fresh = dataclasses.replace(ctx, cache=StageCache(tmp_path / "cache"),
                                run_dir=tmp_path / "run")
    art = artifacts["int8.minmax"]
    step = evaluate(fresh, "search", art.path, reference=reference, artifact_sha=art.sha256,
                    emulated=art.emulated)
    assert not step.cached
    again = evaluate_artifact(fresh, art, reference)  # with its plan's INT8 / FP8 nodes
    assert again.cached and again.name == art.name
    np.testing.assert_array_equal(again.logits, step.logits)
    assert not evaluate_artifact(fresh, artifacts["fp16"], reference).cached
