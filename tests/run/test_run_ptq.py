"""Stage ptq (quantkit/run/ptq.py) on the tiny world: each configured step runs and is
recorded, the FP32 reference stays the original graph, ptq off reproduces the artifacts
without ptq byte for byte, and the stage cache never mixes ptq settings."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from quantkit.assets import sha256_file
from quantkit.qdq.lint import lint_for_target
from quantkit.run import apply_ptq, build_artifacts, calibrate, check_fp16_range, quant_scope
from quantkit.settings import PtqConfig

OFF = PtqConfig(range_search=False, int8_weights=False)
ON = PtqConfig(smoothquant_alpha=0.8, equalization="per_channel_clip", equalization_alpha=0.7,
               range_search=True, range_search_samples=8, bias_correction=True,
               int8_weights=True)


def _with(ctx, tmp_path, ptq: PtqConfig, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    s = dataclasses.replace(ctx.settings, ptq=ptq, **settings)
    return dataclasses.replace(ctx, settings=s, run_dir=tmp_path)


def _run(c):
    scope = apply_ptq(c, quant_scope(c))
    cal = calibrate(c, scope)
    return scope, cal, build_artifacts(c, cal, check_fp16_range(c))


@pytest.fixture(scope="module")
def on(ctx, tmp_path_factory):
    c = _with(ctx, tmp_path_factory.mktemp("ptq-on"), ON)
    return (c, *_run(c))


def test_ptq_off_reproduces_the_artifacts_without_ptq_byte_for_byte(ctx, artifacts, tmp_path):
    c = _with(ctx, tmp_path, OFF)
    scope, cal, arts = _run(c)
    assert scope.ptq.graph is ctx.graph and scope.ptq.records == ()
    assert cal.to_record()["ptq"]["steps"] == [] and not cal.to_record()["ptq"]["graph_rewritten"]
    assert list(arts) == list(artifacts)
    for name, art in arts.items():
        assert art.sha256 == artifacts[name].sha256 == sha256_file(art.path), name
        assert (tmp_path / "plans" / f"{name}.json").read_bytes() == \
            (ctx.run_dir / "plans" / f"{name}.json").read_bytes()
        assert "ptq" not in art.to_record() and art.source_model is None


def test_every_configured_step_runs_and_is_recorded(on):
    c, scope, cal, arts = on
    steps = [r["name"] for r in cal.to_record()["ptq"]["steps"]]
    assert steps == ["equalization", "smoothquant"]
    assert cal.to_record()["ptq"]["settings"] == dataclasses.asdict(ON)
    smooth = cal.to_record()["ptq"]["steps"][1]
    assert smooth["changes"] and smooth["params"]["alpha"] == 0.8
    for name, art in arts.items():
        if name == "fp16":
            assert "ptq" not in art.to_record()  # no INT8 node: nothing for ptq to do
            continue
        rec = art.to_record()["ptq"]
        assert [r["name"] for r in rec] == ["equalization", "smoothquant", "range_search",
                                            "bias_correction"], name
        assert rec[2]["params"]["grid"] == ON.range_search_grid
        for t in rec[2]["changes"]:  # a searched amax is the one the artifact's plan carries
            assert art.plan.activation_amax[t] == pytest.approx(
                float(rec[2]["changes"][t].split(" -> ")[1].split(" ")[0]), rel=1e-3)
        # tiny world: fc1 (the one INT8 node) has no bias Add to correct; said so
        assert rec[3]["skipped"] == {"fc1": "no constant bias to correct (MatMul without a "
                                            "single Add reader)"}


def test_smoothquant_rewrites_only_the_quantized_graph(ctx, on):
    c, scope, cal, arts = on
    g = scope.ptq.graph
    assert g is not ctx.graph and g.sha256 != ctx.graph.sha256
    assert c.graph is ctx.graph  # the FP32 reference graph is the original, untouched
    assert any(t.endswith("__smoothed") for t in scope.tensors)  # calibrated: the smoothed input
    # the smoothed graph computes the same function as the original FP32 graph
    feeds = list(c.batches(c.head(c.splits.calib, 8), 8))[0]
    import onnxruntime as ort

    def run(m):
        return ort.InferenceSession(m.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(run(g.model), run(ctx.graph.model), rtol=1e-4, atol=1e-5)
    # the INT8 artifact quantizes the smoothed tensor with int8 weight initializers
    q = onnx.load(arts["int8.minmax"].path)
    assert any(i.data_type == onnx.TensorProto.INT8 for i in q.graph.initializer)
    assert any(n.op_type == "QuantizeLinear" and n.input[0].startswith("pooled__smoothed")
               for n in q.graph.node)
    for target in ("tensorrt",):
        assert lint_for_target(q, target) == []


def test_comparison_tensors_keep_original_names_and_drop_rescaled_ones(ctx, scope, on):
    _, pscope, _, arts = on
    dropped = pscope.ptq.dropped_compare
    assert set(pscope.compare_tensors) | set(dropped) == set(scope.compare_tensors)
    assert not set(pscope.compare_tensors) & set(dropped)
    names = {o for n in onnx.load(arts["int8.mse"].path).graph.node for o in n.output}
    names |= {i.name for i in ctx.graph.model.graph.input}
    assert set(pscope.compare_tensors) <= names  # every compared tensor exists in the artifact


def test_ort_cpu_target_stays_lint_clean_with_every_step(ctx, tmp_path):
    c = _with(ctx, tmp_path, ON, target="ort_cpu",
              precision=dataclasses.replace(ctx.settings.precision, remainder="fp32"))
    _, _, arts = _run(c)
    for name, art in arts.items():
        assert lint_for_target(onnx.load(art.path), "ort_cpu") == [], name


def test_stage_cache_keys_include_the_ptq_settings(ctx, tmp_path):
    from quantkit.cache import StageCache

    cache = StageCache(tmp_path / "stages", enabled=True)
    base = dataclasses.replace(_with(ctx, tmp_path / "a", OFF), cache=cache)
    quant_off = dataclasses.replace(OFF, bias_correction=True)  # no graph rewrite, other key
    other = dataclasses.replace(base, settings=dataclasses.replace(base.settings, ptq=quant_off))
    for c in (base, other):
        calibrate(c, apply_ptq(c, quant_scope(c)))
        check_fp16_range(c)
    # two ptq settings (same graph) -> two entries per stage, never one reused across them
    for stage in ("calibration_stats", "fp16_range"):
        keys = [k for d in (tmp_path / "stages" / stage).iterdir() if d.is_dir()
                for k in d.iterdir() if k.is_dir()]
        assert len(keys) == 2, (stage, keys)


def test_bad_ptq_setting_is_one_config_error(tiny):
    from quantkit.errors import ConfigError
    from runworld import settings_for

    with pytest.raises(ConfigError, match="ptq.smoothquant_alpha"):
        settings_for(tiny, "ptq.smoothquant_alpha=1.5")
    with pytest.raises(ConfigError, match="ptq.equalization"):
        settings_for(tiny, "ptq.equalization=sometimes")
    assert settings_for(tiny).ptq.int8_weights and settings_for(tiny).ptq.range_search


def test_rescaled_comparison_tensors_are_found_by_value(ctx, scope):
    """A rewrite that keeps names but changes values (here: w1 doubled, so h, hr, z change)
    drops exactly those tensors from the per-layer comparison."""
    from onnx import numpy_helper

    from quantkit.graph.model_graph import ModelGraph
    from quantkit.run.ptq import _changed_tensors

    m = onnx.ModelProto()
    m.CopyFrom(ctx.graph.model)
    for i, init in enumerate(m.graph.initializer):
        if init.name == "w1":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(
                2 * numpy_helper.to_array(init), "w1"))
    dropped = _changed_tensors(ctx, ModelGraph.build(m), scope.compare_tensors)
    assert "pooled" in scope.compare_tensors and "pooled" not in dropped
    assert {"h", "z"} <= set(dropped) and set(dropped) <= set(scope.compare_tensors)


def test_rebuild_args_rebuild_a_ptq_artifact_byte_for_byte(on, tmp_path):
    """The search rebuilds plan variants of the best INT8 artifact: rebuild_args gives the
    graph and keywords that reproduce that artifact exactly (smoothed graph, int8 weights)."""
    from quantkit.run.artifacts import build_artifact, rebuild_args

    c, _, _, arts = on
    art = arts["int8.percentile"]
    assert art.quant_graph is not None and art.int8_weights
    rc, kw = rebuild_args(c, art)
    again = build_artifact(rc, "int8.percentile", art.plan, out_dir=tmp_path,
                           nonfinite=(), **kw)
    assert again.sha256 == art.sha256 and again.to_record()["ptq"] == art.to_record()["ptq"]
    from quantkit.errors import QuantkitError

    with pytest.raises(QuantkitError, match="no amax"):  # the original graph reads `pooled`
        build_artifact(c, "int8.percentile", art.plan, out_dir=tmp_path / "plain")


def test_bias_correction_edits_the_int8_graph_as_the_pipeline_does(tmp_path):
    """A tiny world whose fc1 has a bias Add: the stage's bias correction (statistics shared
    across calibrators) gives the same corrected graph as quantkit.ptq.pipeline.before_qdq,
    the artifact carries it, and the FP32 reference graph keeps the original bias."""
    import tinyworld
    from onnx import helper, numpy_helper

    from quantkit.ptq.pipeline import before_qdq
    from quantkit.run import prepared_context
    from quantkit.run.ptq import calib_batches
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
    c = prepared_context(settings_for(world, "stage_cache=false", "ptq.bias_correction=true",
                                      "ptq.range_search=false"), tmp_path / "run")
    scope, cal, arts = _run(c)
    art = arts["int8.minmax"]
    rec = art.to_record()["ptq"]
    assert [r["name"] for r in rec] == ["bias_correction"] and "fc1" in rec[0]["changes"]
    expected, _ = before_qdq(c.graph.model, art.plan, calib_batches(c), scope.ptq.options, [])

    def b1(model):
        return numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "b1"))
    assert not np.array_equal(b1(expected), b1(c.graph.model))
    np.testing.assert_array_equal(b1(art.source_model), b1(expected))
    # the bias Add runs in the FP16 remainder: the file holds the corrected bias in FP16
    np.testing.assert_array_equal(b1(onnx.load(art.path)), b1(expected).astype(np.float16))
    np.testing.assert_array_equal(b1(c.graph.model), np.full(dim, 0.1, np.float32))


def test_range_search_and_bias_means_are_stage_cached(ctx, tmp_path):
    """A warm rerun reads the searched ranges and bias-correction means from the stage cache
    (``ptq_refine``) and builds byte-identical artifacts; another ptq setting is another
    entry, never the old one."""
    from quantkit.cache import StageCache

    cache = StageCache(tmp_path / "stages", enabled=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", ON), cache=cache)
    first = _run(c)[2]
    entries = lambda: sorted(k.name for d in (tmp_path / "stages" / "ptq_refine").iterdir()  # noqa: E731
                             if d.is_dir() for k in d.iterdir() if k.is_dir())
    n_int8 = sum(1 for name in first if name.startswith("int8."))
    assert len(entries()) == n_int8
    warm = _run(dataclasses.replace(c, run_dir=tmp_path / "b"))[2]
    assert len(entries()) == n_int8  # all hits
    for name, art in first.items():
        assert warm[name].sha256 == art.sha256, name
        assert warm[name].to_record().get("ptq") == art.to_record().get("ptq"), name
    other = dataclasses.replace(ON, range_search_grid=8)
    _run(dataclasses.replace(_with(ctx, tmp_path / "c", other), cache=cache))
    assert len(entries()) == 2 * n_int8


@pytest.mark.parametrize("method", ["gptq", "gptq_aware", "gptq_sequential"])
def test_weight_rounding_is_cached_per_int8_set_and_rebuilt_plans_restore_weights(ctx, tmp_path,
                                                                                 method):
    """ptq.weight_rounding=gptq: every INT8 artifact carries the pipeline's rounded weights
    (one ``ptq_rounding`` entry shared by the calibrators, read back on a warm rerun with
    byte-identical artifacts; gptq_aware and gptq_sequential see the input ranges: one
    entry per plan; their bias edits come back from the cache too, tests/ptq/test_sequential.py);
    a plan rebuilt from it that keeps fc1 out of INT8 runs fc1 with its original weight."""
    from onnx import numpy_helper

    from quantkit.cache import StageCache
    from quantkit.ptq.pipeline import before_qdq
    from quantkit.run.artifacts import build_artifact, rebuild_args
    from quantkit.run.ptq import calib_batches

    cache = StageCache(tmp_path / "stages", enabled=True)
    cfg = dataclasses.replace(OFF, weight_rounding=method, int8_weights=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", cfg), cache=cache)
    scope, cal, arts = _run(c)
    art = arts["int8.minmax"]
    rec = art.to_record()["ptq"]
    int8 = sorted(art.plan.int8_nodes())
    assert "fc1" in int8
    assert [r["name"] for r in rec] == ["weight_rounding"] and sorted(rec[0]["changes"]) == int8
    expected, _ = before_qdq(c.graph.model, art.plan, calib_batches(c), scope.ptq.options, [])

    def w(model, node):
        n = next(x for x in model.graph.node if x.name == node)
        return numpy_helper.to_array(next(i for i in model.graph.initializer
                                          if i.name == n.input[1]))
    def bias(model, node):
        from quantkit.ptq.bias_correction import bias_slot
        from quantkit.ptq.graphutil import InitializerEditor

        ed = InitializerEditor(model)
        n = next(x for x in model.graph.node if x.name == node)
        where = bias_slot(n, ed, w(model, node).shape[-1 if n.op_type == "MatMul" else 0])
        return None if where is None or where[1] is None else ed.array(
            where[0].input[where[1]])
    for node in int8:
        np.testing.assert_array_equal(w(art.source_model, node), w(expected, node))
        assert not np.array_equal(w(expected, node), w(c.graph.model, node))
        np.testing.assert_array_equal(bias(art.source_model, node), bias(expected, node))
    if method != "gptq":  # fc1 (the one INT8 node here) has no bias: the step says so
        assert rec[0]["skipped"] == {"fc1:bias": "no constant bias to correct"}
    entries = [p for p in (tmp_path / "stages").rglob("*") if p.is_dir()
               and p.parent.name == "ptq_rounding"]
    plans = {tuple(sorted(a.plan.activation_amax.items())) for n, a in arts.items()
             if n.startswith("int8.")}
    assert len(entries) == (1 if method == "gptq" else len(plans))  # gptq: one INT8 set
    warm = dataclasses.replace(_with(ctx, tmp_path / "b", cfg), cache=cache)
    again = _run(warm)[2]
    assert {k: a.sha256 for k, a in again.items()} == {k: a.sha256 for k, a in arts.items()}

    rc, kw = rebuild_args(c, art)
    assert kw["model"] is not None  # the rounded graph is what a rebuild starts from
    mixed = build_artifact(rc, "mixed", art.plan.with_precision(["fc1"], "fp32", "test"),
                           out_dir=tmp_path / "mixed", **kw)
    np.testing.assert_array_equal(w(onnx.load(mixed.path), "fc1"), w(c.graph.model, "fc1"))


def test_sequential_rounding_entry_is_keyed_by_the_int8_network_it_sees(ctx, tmp_path):
    """gptq_sequential's ``ptq_rounding`` entry is keyed by the Q/DQ graph its statistics
    run: a plan that differs only in the range of a tensor no INT8 node reads is a hit (the
    four calibrators of a run share it when their ranges converge), a changed range of an
    INT8 input is a new entry."""
    from quantkit.cache import StageCache
    from quantkit.run.ptq import _rounded

    cache = StageCache(tmp_path / "stages", enabled=True)
    cfg = dataclasses.replace(OFF, weight_rounding="gptq_sequential", int8_weights=True)
    c = dataclasses.replace(_with(ctx, tmp_path / "a", cfg), cache=cache)
    scope = apply_ptq(c, quant_scope(c))
    art = build_artifacts(c, calibrate(c, scope), check_fp16_range(c))["int8.minmax"]
    entries = lambda: sorted(p.name for p in (tmp_path / "stages").rglob("*")  # noqa: E731
                             if p.is_dir() and p.parent.parent.name == "ptq_rounding")
    before = entries()
    assert before  # the run wrote its entries
    amax = dict(art.plan.activation_amax)
    read = {n.input[0] for n in c.graph.model.graph.node if n.name in art.plan.int8_nodes()}
    unread = "logits"
    assert unread not in read
    _rounded(c, scope.ptq, dataclasses.replace(art.plan, activation_amax={**amax, unread: 3.0}))
    assert entries() == before
    t = sorted(read & set(amax))[0]
    _rounded(c, scope.ptq, dataclasses.replace(art.plan, activation_amax={**amax, t: amax[t] / 2}))
    assert len(entries()) == len(before) + 1
