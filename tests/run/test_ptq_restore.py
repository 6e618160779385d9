"""Every rewrite proven on the run's own model (issue 28, point 2), on a small real CNN whose
convolutions have no bias (the MobileNetV3 export pattern: BatchNorm unfolded, bias-less
Convs) and a ReLU6 between the last pair:

- sequential weight rounding adds bias initializers to bias-less Convs; equalization rescales
  Conv pairs (and turns the ReLU6 into Relu + Min): the plan with every weighted node in FP16,
  built from that rewritten graph, computes exactly what the fp16 candidate computes;
- a plan that keeps a Conv out of INT8 runs that Conv with its original weight and without the
  bias the rounding added;
- a rewrite that changes the FP32 function is dropped for the model, with its reason in the
  record, and the graph that gets quantized is the one before it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_graphs import cnn_run_context, save_cnn
from quantkit.record.serde import encode
from quantkit.backends.batched import run_split


def biasless_cnn(path) -> None:
    """conv1 (3->16) -> Relu -> conv2 (depthwise) -> Clip(0, 6) -> conv3 (16->16) -> GAP ->
    Gemm head: no Conv has a bias; dark vs bright images."""
    rng = np.random.default_rng(0)
    w1 = (np.abs(rng.standard_normal((16, 3, 3, 3))) * 0.1).astype(np.float32)
    w1[:4] *= 8.0  # uneven channel ranges: equalization has work to do
    w2 = (rng.standard_normal((16, 1, 3, 3)) * 0.5).astype(np.float32)
    w3 = (rng.standard_normal((16, 16, 1, 1)) * 0.3).astype(np.float32)
    fc = np.stack([np.ones(16), -np.ones(16)]).astype(np.float32) / 4
    inits = {"w1": w1, "w2": w2, "w3": w3, "fc": fc, "fb": np.array([-1.0, 1.0], np.float32),
             "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                              group=16),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"], name="relu6"),
             helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
             helper.make_node("GlobalAveragePool", ["c3"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="head", transB=1)]
    save_cnn(nodes, inits, path, "biasless_cnn")


@pytest.fixture(scope="module")
def cnn_ctx(tmp_path_factory):
    root = tmp_path_factory.mktemp("biasless")
    biasless_cnn(root / "cnn.onnx")
    return cnn_run_context(root, root / "cnn.onnx", "biasless", "ptq.recipe=custom",
                           "ptq.equalization=per_channel_clip", "ptq.equalization_alpha=0.5",
                           "ptq.range_search=true", "ptq.weight_rounding=gptq_sequential")


@pytest.fixture(scope="module")
def built(cnn_ctx):
    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.scope import quant_scope

    c = cnn_ctx
    overflow = check_fp16_range(c)
    sources = apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c))
    source = sources.int8
    return source, build_artifacts(c, calibrate(c, sources), overflow, sources)


def _outputs(c, art):
    model = art.emulated() if art.emulated is not None else onnx.load(art.path)
    with c.runner(model, name="t") as r:
        return run_split(r, c.feeds, c.splits.dev, output=c.model.output_name, batch_size=8,
                         progress=False)


def _weight(model, node, slot=1):
    n = next(x for x in model.graph.node if x.name == node)
    if len(n.input) <= slot or not n.input[slot]:
        return None
    return numpy_helper.to_array(next(i for i in model.graph.initializer
                                      if i.name == n.input[slot]))


def test_the_rewrites_ran_and_were_proven(built):
    source, arts = built
    names = [s.name for s in source.steps]
    assert names == ["equalization"] and source.is_rewritten
    eq = source.steps[0]
    assert len(eq.changes) == 2 and eq.groups  # conv1 -> conv2 (Relu), conv2 -> conv3 (ReLU6)
    assert [p.step for p in source.proofs] == ["equalization"] and source.proofs[0].kept
    refined = arts["int8.minmax"].refined.load()
    rounding = next(r for r in refined.records if r.name == "weight_rounding")
    assert rounding.params["sequential"] and rounding.changes
    added = [n for n in ("conv1", "conv2", "conv3") if _weight(refined.model, n, 2) is not None]
    assert added, "sequential rounding moved the missed mean output into added biases"


def test_every_weighted_node_in_fp16_is_exactly_the_fp16_candidate(cnn_ctx, built, tmp_path):
    """The acceptance case: no INT8 node left, built from the rewritten, rounded graph."""
    from quantkit.run.artifact import build_variant

    c = cnn_ctx
    source, arts = built
    base = arts["int8.minmax"]
    keep = c.settings.precision.remainder
    plan = base.plan.with_precision(base.plan.int8_nodes(), keep, "test: every node FP16")
    variant = build_variant(c, "allfp16", base, plan, source, arts["fp16"].plan,
                            out_dir=tmp_path)
    m = onnx.load(variant.path)
    assert not variant.plan.int8_nodes()
    assert all(_weight(m, n, 2) is None for n in ("conv1", "conv2", "conv3"))  # no added bias
    assert any(n.op_type == "Clip" for n in m.graph.node)  # the ReLU6 is back
    np.testing.assert_array_equal(_outputs(c, variant), _outputs(c, arts["fp16"]))


def test_a_conv_kept_out_of_int8_runs_its_original_constants(cnn_ctx, built, tmp_path):
    """conv3 alone left out of INT8: its equalization group (tied to conv1 through conv2)
    still has INT8 nodes, so the equalized weights stay (the pair's function needs both);
    the rounding's added bias and rounded weight of conv3 go."""
    from quantkit.run.artifact import build_variant

    c = cnn_ctx
    source, arts = built
    base = arts["int8.minmax"]
    keep = c.settings.precision.remainder
    plan = base.plan.with_precision(["conv3"], keep, "test")
    variant = build_variant(c, "no-conv3", base, plan, source, arts["fp16"].plan,
                            out_dir=tmp_path)
    m = onnx.load(variant.path)
    assert _weight(m, "conv3", 2) is None
    np.testing.assert_array_equal(
        _weight(m, "conv3").astype(np.float32),
        _weight(source.graph.model, "conv3").astype(np.float16).astype(np.float32))


def test_a_rewrite_that_changes_the_fp32_function_is_dropped_with_its_reason(cnn_ctx):
    """A zero tolerance turns float re-association (about 1e-7 of the output) into a changed
    function: the equalization is dropped, said so in the steps and the proof, and the graph
    that gets quantized is the original."""
    from quantkit.ptq.pipeline import rewrite
    from quantkit.settings.ptq_recipe import Recipe
    from quantkit.run.quant_source import calib_data, ptq_runners

    c = cnn_ctx
    recipe = Recipe(equalization="per_channel_clip", equalization_alpha=0.5)
    out = rewrite(c.graph.model, recipe, calib_data(c), output="logits",
                  runners=ptq_runners(c), tolerance=0.0)
    assert out.model is c.graph.model
    proof = out.proofs[0]
    assert not proof.kept and proof.max_error > 0.0
    assert "dropped for this model" in proof.reason and "of its scale" in proof.reason
    assert out.steps[0].changes == {} and out.steps[0].skipped["*"] == proof.reason


def test_prove_rewrite_rejects_scaling_across_a_non_homogeneous_activation(cnn_ctx):
    """Equalization's scale does not commute with HardSwish: a pair scaled across one (what
    equalization itself refuses to do) changes the FP32 function and fails the proof."""
    from quantkit.ptq.proof import prove_rewrite
    from quantkit.run.quant_source import calib_data, ptq_runners

    c = cnn_ctx
    before = onnx.ModelProto()
    before.CopyFrom(c.graph.model)
    for n in before.graph.node:
        if n.name == "relu1":
            n.op_type = "HardSwish"
    after = onnx.ModelProto()
    after.CopyFrom(before)
    s = np.linspace(0.25, 4.0, 16).astype(np.float32)
    for init in after.graph.initializer:
        a = numpy_helper.to_array(init)
        if init.name == "w1":
            init.CopyFrom(numpy_helper.from_array(a / s[:, None, None, None], "w1"))
        if init.name == "w2":
            init.CopyFrom(numpy_helper.from_array(a * s[:, None, None, None], "w2"))
    proof = prove_rewrite("equalization", before, after, calib_data(c).subset(),
                          output="logits", runner_factory=ptq_runners(c).fp32)
    assert not proof.kept and proof.relative_error > 1e-3
    same = prove_rewrite("none", before, before, calib_data(c).subset(), output="logits",
                         runner_factory=ptq_runners(c).fp32)
    assert same.kept and same.max_error == 0.0 and same.agreement == 1.0


def test_the_record_lists_steps_and_proofs(built):
    source, _ = built
    rec = encode(source.to_record())
    assert rec["graph_rewritten"] and rec["proofs"][0]["kept"]
    assert rec["steps"][0]["groups"] and dataclasses.asdict(source.proofs[0])["examples"] > 0


def test_mixed_plans_keep_one_pass_edits_where_the_recipe_rounds_sequentially(cnn_ctx, built,
                                                                               tmp_path):
    """Sequential rounding fits each Conv with the Convs before it INT8 (its bias carries
    their mean error); a mixed plan is restored from the same plan refined with the one-pass
    gptq_aware instead, whose edits hold whatever the other nodes' precision: the plan
    without conv3 keeps conv1 and conv2 INT8 with the aware edits, not the sequential ones."""
    from quantkit.run.artifact import build_variant

    c = cnn_ctx
    source, arts = built
    base = arts["int8.minmax"]
    recipe = source.variant_recipe
    assert recipe.weight_rounding == "gptq_aware" and not recipe.range_search
    sequential = base.refined.load()
    assert arts["fp16"].refined is None
    assert source.variant_refined(c, arts["fp16"].refined) is None
    aware = source.variant_refined(c, base.refined)
    assert aware.plan.activation_amax == sequential.plan.activation_amax  # ranges kept
    rounding = next(r for r in aware.records if r.name == "weight_rounding")
    assert not rounding.params.get("sequential")
    # conv2 reads conv1's output: its sequential fit saw conv1 INT8, the aware one did not
    assert not np.array_equal(_weight(aware.model, "conv2", 2),
                              _weight(sequential.model, "conv2", 2))
    plan = base.plan.with_precision(["conv3"], c.settings.precision.remainder, "test")
    variant = build_variant(c, "no-conv3-aware", base, plan, source, arts["fp16"].plan,
                            out_dir=tmp_path)
    kept = [r for r in variant.steps if r.name == "weight_rounding"]
    assert kept and not kept[-1].params.get("sequential")
    restored = source.restored_for(aware, plan, arts["fp16"].plan)
    for node in ("conv1", "conv2"):
        np.testing.assert_array_equal(_weight(restored.model, node), _weight(aware.model, node))
