"""Stage ptq (quantkit/run/stages/ptq.py) on the tiny world: the INT8 source every later stage
quantizes from. Each step of the recipe runs and is recorded, every rewrite carries its
proof, the FP32 reference stays the original graph, a recipe without steps reproduces the
plain artifacts byte for byte, the stage cache keys every statistics pass by what made it,
and variants built for the search run the original FP32 function on every non-INT8 node."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from quantkit.record.serde import encode
from quantkit.assets import sha256_file
from quantkit.qdq.lint import lint_for_target
from quantkit.run.stages.ptq import ptq as apply_ptq
from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
from quantkit.run.stages.artifacts import artifacts as build_artifacts
from quantkit.run.stages.calibration import calibration as calibrate
from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
from quantkit.run.scope import quant_scope
from quantkit.settings import PtqConfig

OFF = PtqConfig(recipe="custom", range_search=False, int8_weights=False)
ON = PtqConfig(recipe="custom", smoothquant_alpha=0.8, equalization="per_channel_clip",
               equalization_alpha=0.7, range_search=True, range_search_samples=8,
               bias_correction=True, int8_weights=True)


def _with(ctx, tmp_path, ptq: PtqConfig, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    s = dataclasses.replace(ctx.settings, ptq=ptq, **settings)
    return dataclasses.replace(ctx, settings=s, run_dir=tmp_path)


def _run(c):
    overflow = check_fp16_range(c)
    sources = apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c))
    source = sources.int8
    cal = calibrate(c, sources)
    return source, cal, build_artifacts(c, cal, overflow, sources)


@pytest.fixture(scope="module")
def on(ctx, tmp_path_factory):
    c = _with(ctx, tmp_path_factory.mktemp("ptq-on"), ON)
    return (c, *_run(c))


def test_a_recipe_without_steps_quantizes_the_original_graph(ctx, tmp_path):
    """No step, no int8 weights: the source is the run's own graph and the artifacts are
    the plain Q/DQ of each calibrator's plan, byte for byte."""
    from quantkit.run.artifact import build_artifact
    from quantkit.run.plans import plan_for_ranges

    c = _with(ctx, tmp_path, OFF)
    source, cal, arts = _run(c)
    assert source.graph is ctx.graph and source.steps == () and source.proofs == ()
    rec = encode(source.to_record())
    assert rec["steps"] == [] and not rec["graph_rewritten"] and rec["recipe"] == "custom"
    for name, art in arts.items():
        assert art.sha256 == sha256_file(art.path), name
        if name.startswith("int8."):
            rng = cal.ranges[name.split(".", 1)[1]]
            plain = build_artifact(c, name, plan_for_ranges(c, rng, source.fp16),
                                   out_dir=tmp_path / "plain", nonfinite=rng.excluded)
            assert plain.sha256 == art.sha256, name
        assert "ptq" not in art.to_record()


def test_every_configured_step_runs_and_is_recorded_with_its_proof(on):
    c, source, cal, arts = on
    rec = encode(source.to_record())
    assert [r["name"] for r in rec["steps"]] == ["equalization", "smoothquant"]
    assert rec["settings"] == {k: v for k, v in dataclasses.asdict(ON).items()
                               if k in rec["settings"]}
    smooth = rec["steps"][1]
    assert smooth["changes"] and smooth["params"]["alpha"] == 0.8 and smooth["groups"]
    proofs = {p["step"]: p for p in rec["proofs"]}
    assert proofs["smoothquant"]["kept"] and proofs["smoothquant"]["agreement"] == 1.0
    assert proofs["smoothquant"]["relative_error"] <= proofs["smoothquant"]["tolerance"]
    for name, art in arts.items():
        if name == "fp16":
            assert "ptq" not in art.to_record()  # no INT8 node: nothing for ptq to do
            continue
        steps = art.to_record()["ptq"]
        assert [r["name"] for r in steps] == ["equalization", "smoothquant", "range_search",
                                              "bias_correction"], name
        assert steps[2]["params"]["grid"] == ON.range_search_grid
        for t in steps[2]["changes"]:  # a searched amax is the one the artifact's plan carries
            assert art.plan.activation_amax[t] == pytest.approx(
                float(steps[2]["changes"][t].split(" -> ")[1].split(" ")[0]), rel=1e-3)
        # tiny world: fc1 (the one INT8 node) has no bias Add to correct; said so
        assert steps[3]["skipped"] == {"fc1": "no constant bias to correct (MatMul without "
                                              "a single Add reader)"}


def test_smoothquant_rewrites_only_the_quantized_graph(ctx, on):
    c, source, cal, arts = on
    g = source.graph
    assert g is not ctx.graph and g.sha256 != ctx.graph.sha256 and source.original is ctx.graph
    assert c.graph is ctx.graph  # the FP32 reference graph is the original, untouched
    assert any(t.endswith("__smoothed") for t in source.scope.tensors)
    feeds = list(c.batches(c.head(c.splits.calib, 8), 8))[0]
    import onnxruntime as ort

    def run(m):
        return ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(run(g.model), run(ctx.graph.model), rtol=1e-4, atol=1e-5)
    q = onnx.load(arts["int8.minmax"].path)
    assert any(i.data_type == onnx.TensorProto.INT8 for i in q.graph.initializer)
    assert any(n.op_type == "QuantizeLinear" and n.input[0].startswith("pooled__smoothed")
               for n in q.graph.node)
    assert lint_for_target(q, "tensorrt") == []


def test_comparison_tensors_keep_original_names_and_drop_rescaled_ones(ctx, scope, on):
    _, source, _, arts = on
    dropped = source.dropped_compare
    assert set(source.scope.compare_tensors) | set(dropped) == set(scope.compare_tensors)
    assert not set(source.scope.compare_tensors) & set(dropped)
    names = {o for n in onnx.load(arts["int8.mse"].path).graph.node for o in n.output}
    names |= {i.name for i in ctx.graph.model.graph.input}
    assert set(source.scope.compare_tensors) <= names


def test_ort_cpu_target_stays_lint_clean_with_every_step(ctx, tmp_path):
    c = _with(ctx, tmp_path, ON, target="ort_cpu",
              precision=dataclasses.replace(ctx.settings.precision, remainder="fp32"))
    _, _, arts = _run(c)
    for name, art in arts.items():
        assert lint_for_target(onnx.load(art.path), "ort_cpu") == [], name


def test_calibration_is_keyed_by_the_graph_not_the_recipe_name(ctx, tmp_path):
    """Two recipes that leave the graph alone share one calibration pass; a rewrite is
    another graph, so another entry."""
    from quantkit.cache import StageCache

    cache = StageCache(tmp_path / "stages", enabled=True)
    for i, ptq in enumerate((OFF, dataclasses.replace(OFF, bias_correction=True), ON)):
        c = dataclasses.replace(_with(ctx, tmp_path / str(i), ptq), cache=cache)
        overflow = check_fp16_range(c)
        calibrate(c, apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c)))
    keys = [k for d in (tmp_path / "stages" / "calibration_stats").iterdir() if d.is_dir()
            for k in d.iterdir() if k.is_dir()]
    assert len(keys) == 2, keys


def test_bad_ptq_setting_is_one_config_error(tiny):
    from quantkit.errors import ConfigError
    from runworld import settings_for

    with pytest.raises(ConfigError, match="ptq.smoothquant_alpha"):
        settings_for(tiny, "ptq.recipe=custom", "ptq.smoothquant_alpha=1.5")
    with pytest.raises(ConfigError, match="ptq.equalization"):
        settings_for(tiny, "ptq.recipe=custom", "ptq.equalization=sometimes")
    with pytest.raises(ConfigError, match="ptq.recipe=custom"):  # a step key beside a recipe
        settings_for(tiny, "ptq.smoothquant_alpha=0.5")
    with pytest.raises(ConfigError, match="ptq.recipe"):
        settings_for(tiny, "ptq.recipe=fastest")
    assert settings_for(tiny).ptq.recipe == "generic"


def test_rescaled_comparison_tensors_are_found_by_value(ctx, scope):
    """A rewrite that keeps names but changes values (here: w1 doubled, so h, hr, z change)
    drops exactly those tensors from the per-layer comparison."""
    from onnx import numpy_helper

    from quantkit.graph.model_graph import ModelGraph
    from quantkit.run.int8_source import _changed_tensors

    m = onnx.ModelProto()
    m.CopyFrom(ctx.graph.model)
    for i, init in enumerate(m.graph.initializer):
        if init.name == "w1":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                2 * numpy_helper.to_array(init), "w1"))
    dropped = _changed_tensors(ctx, ModelGraph.build(m), scope.compare_tensors)
    assert "pooled" in scope.compare_tensors and "pooled" not in dropped
    assert {"h", "z"} <= set(dropped) and set(dropped) <= set(scope.compare_tensors)


def test_a_variant_with_every_int8_node_is_the_candidate_byte_for_byte(on, tmp_path):
    """The search builds plan variants of the best INT8 artifact: the variant with the same
    INT8 nodes is that artifact exactly (smoothed graph, int8 weights, ptq edits)."""
    from quantkit.run.artifact import build_variant

    c, source, _, arts = on
    art = arts["int8.percentile"]
    again = build_variant(c, "int8.percentile", art, art.plan, source, arts["fp16"].plan,
                          out_dir=tmp_path)
    assert again.sha256 == art.sha256 and again.to_record()["ptq"] == art.to_record()["ptq"]


def test_a_variant_without_int8_nodes_is_the_fp16_candidate(on, tmp_path):
    """Every node out of INT8: the equalization / SmoothQuant groups and the per-plan edits
    are all put back, so the variant computes exactly what the fp16 candidate computes."""
    from quantkit.backends.batched import run_split
    from quantkit.run.artifact import build_variant

    c, source, _, arts = on
    art = arts["int8.minmax"]
    keep = c.settings.precision.remainder
    plan = art.plan.with_precision(art.plan.int8_nodes(), keep, "test: no INT8")
    variant = build_variant(c, "allfp16", art, plan, source, arts["fp16"].plan,
                            out_dir=tmp_path)
    assert not variant.plan.int8_nodes()
    names = {n.name for n in onnx.load(variant.path).graph.node}
    assert not any("__smooth" in n for n in names)  # the inserted Mul went with its group
    outs = []
    for a in (variant, arts["fp16"]):
        model = a.emulated() if a.emulated is not None else onnx.load(a.path)
        with c.runner(model, name="t") as r:
            outs.append(run_split(r, c.feeds, c.splits.dev, output=c.model.output_name,
                                  batch_size=16, progress=False))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_bias_correction_edits_the_int8_graph_as_the_pipeline_does(tmp_path):
    """A tiny world whose fc1 has a bias Add: the stage's bias correction gives the graph
    the pipeline gives, the artifact carries it, the FP32 reference keeps the original bias,
    and a variant that keeps fc1 out of INT8 runs the original bias again."""
    import tinyworld
    from onnx import helper, numpy_helper

    from quantkit.ptq.pipeline import refine
    from quantkit.settings.ptq_recipe import Recipe
    from quantkit.app import prepared_context
    from quantkit.run.artifact import build_variant
    from quantkit.run.quant_source import calib_data
    from runworld import settings_for

    m = tinyworld.text_model()
    fc1 = next(n for n in m.graph.node if n.name == "fc1")
    fc1.output[0] = "h0"
    idx = list(m.graph.node).index(fc1)
    m.graph.node.insert(idx + 1, helper.make_node("Add", ["h0", "b1"], ["h"], name="fc1_bias"))
    dim = next(i for i in m.graph.initializer if i.name == "w1").dims[1]
    m.graph.initializer.append(numpy_helper.from_array(np.full(dim, 0.1, np.float32), "b1"))
    world = tinyworld.make_world(tmp_path / "w")
    tinyworld.write_model(world["model"], m)
    c = prepared_context(settings_for(world, "stage_cache=false", "ptq.recipe=custom",
                                      "ptq.bias_correction=true"), tmp_path / "run")
    source, cal, arts = _run(c)
    art = arts["int8.minmax"]
    rec = art.to_record()["ptq"]
    assert [r["name"] for r in rec] == ["bias_correction"] and "fc1" in rec[0]["changes"]
    expected = refine(c.graph.model, art.plan, cal.ranges, Recipe(bias_correction=True),
                      calib_data(c)).model

    def b1(model):
        return numpy_helper.to_array(next(i for i in model.graph.initializer
                                          if i.name == "b1"))
    assert not np.array_equal(b1(expected), b1(c.graph.model))
    np.testing.assert_array_equal(b1(art.refined.load().model), b1(expected))
    np.testing.assert_array_equal(b1(onnx.load(art.path)), b1(expected).astype(np.float16))
    np.testing.assert_array_equal(b1(c.graph.model), np.full(dim, 0.1, np.float32))
    keep = c.settings.precision.remainder
    out = build_variant(c, "mixed", art, art.plan.with_precision(["fc1"], keep, "test"),
                        source, arts["fp16"].plan, out_dir=tmp_path / "mixed")
    np.testing.assert_array_equal(b1(onnx.load(out.path)),
                                  np.full(dim, 0.1, np.float32).astype(np.float16))


def test_ptq_passes_are_stage_cached(ctx, tmp_path):
    """A warm rerun reads the searched ranges and the bias means from the stage cache and
    builds byte-identical artifacts; another ptq setting is another entry, never the old."""
    from quantkit.cache import StageCache

    cache = StageCache(tmp_path / "stages", enabled=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", ON), cache=cache)
    first = _run(c)[2]

    def entries(kind):
        root = tmp_path / "stages" / kind
        return sorted(k.name for d in root.iterdir() if d.is_dir() for k in d.iterdir()
                      if k.is_dir())
    searches = entries("ptq_range_search")
    assert searches and entries("ptq_bias_means")
    warm = _run(dataclasses.replace(c, run_dir=tmp_path / "b"))[2]
    assert entries("ptq_range_search") == searches  # all hits
    for name, art in first.items():
        assert warm[name].sha256 == art.sha256, name
        assert warm[name].to_record().get("ptq") == art.to_record().get("ptq"), name
    other = dataclasses.replace(ON, range_search_grid=8)
    _run(dataclasses.replace(_with(ctx, tmp_path / "c", other), cache=cache))
    assert len(entries("ptq_range_search")) > len(searches)


@pytest.mark.parametrize("method", ["gptq", "gptq_aware", "gptq_sequential"])
def test_weight_rounding_is_cached_and_variants_restore_weights(ctx, tmp_path, method):
    """ptq.weight_rounding: every INT8 artifact carries the pipeline's rounded weights (one
    ``ptq_rounding`` entry per INT8 set for gptq; per plan for the methods that see the
    input ranges), read back on a warm rerun with byte-identical artifacts; a variant that
    keeps fc1 out of INT8 runs fc1 with its original weight."""
    from onnx import numpy_helper

    from quantkit.cache import StageCache
    from quantkit.ptq.pipeline import refine
    from quantkit.settings.ptq_recipe import Recipe
    from quantkit.run.artifact import build_variant
    from quantkit.run.quant_source import calib_data

    cache = StageCache(tmp_path / "stages", enabled=True)
    cfg = dataclasses.replace(OFF, weight_rounding=method, int8_weights=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", cfg), cache=cache)
    source, cal, arts = _run(c)
    art = arts["int8.minmax"]
    rec = art.to_record()["ptq"]
    int8 = sorted(art.plan.int8_nodes())
    assert "fc1" in int8
    assert [r["name"] for r in rec] == ["weight_rounding"] and sorted(rec[0]["changes"]) == int8
    expected = refine(c.graph.model, art.plan, cal.ranges,
                      Recipe(weight_rounding=method), calib_data(c)).model

    def w(model, node):
        n = next(x for x in model.graph.node if x.name == node)
        return numpy_helper.to_array(next(i for i in model.graph.initializer
                                          if i.name == n.input[1]))
    refined = art.refined.load().model
    for node in int8:
        np.testing.assert_array_equal(w(refined, node), w(expected, node))
        assert not np.array_equal(w(expected, node), w(c.graph.model, node))
    if method != "gptq":  # fc1 (the one INT8 node here) has no bias: the step says so
        assert rec[0]["skipped"] == {"fc1:bias": "no constant bias to correct"}
    entries = [p for p in (tmp_path / "stages").rglob("*") if p.is_dir()
               and p.parent.parent.name == "ptq_rounding"]
    assert entries
    warm = dataclasses.replace(_with(ctx, tmp_path / "b", cfg), cache=cache)
    again = _run(warm)[2]
    assert {k: a.sha256 for k, a in again.items()} == {k: a.sha256 for k, a in arts.items()}
    keep = c.settings.precision.remainder
    mixed = build_variant(c, "mixed", art, art.plan.with_precision(["fc1"], keep, "test"),
                          source, arts["fp16"].plan, out_dir=tmp_path / "mixed")
    np.testing.assert_array_equal(w(onnx.load(mixed.path), "fc1"),
                                  w(c.graph.model, "fc1").astype(np.float16))


@pytest.mark.parametrize("method", ["gptq_aware", "gptq_sequential"])
def test_rounding_entry_is_keyed_by_the_ranges_it_reads(ctx, tmp_path, method):
    """The ``ptq_rounding`` entry of the methods that see input ranges is keyed by what
    their statistics read (gptq_aware: the rounded nodes' input ranges; gptq_sequential: the
    Q/DQ graph it runs): a plan that differs only in the range of a tensor no INT8 node
    reads is a hit (the calibrators' plans after range search share one rounding), a changed
    range of an INT8 input is a new entry."""
    from quantkit.cache import StageCache

    cache = StageCache(tmp_path / "stages", enabled=True)
    cfg = dataclasses.replace(OFF, weight_rounding=method, int8_weights=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", cfg), cache=cache)
    source, cal, arts = _run(c)
    art = arts["int8.minmax"]
    entries = lambda: sorted(p.name for p in (tmp_path / "stages").rglob("*")  # noqa: E731
                             if p.is_dir() and p.parent.parent.name == "ptq_rounding")
    before = entries()
    assert before
    amax = dict(art.plan.activation_amax)
    read = {n.input[0] for n in c.graph.model.graph.node if n.name in art.plan.int8_nodes()}
    unread = "logits"
    assert unread not in read
    source.refine(c, dataclasses.replace(art.plan, activation_amax={**amax, unread: 3.0}),
                  cal.ranges)
    assert entries() == before
    t = sorted(read & set(amax))[0]
    source.refine(c, dataclasses.replace(art.plan, activation_amax={**amax, t: amax[t] / 2}),
                  cal.ranges)
    assert len(entries()) == len(before) + 1
