"""QuantScope and what precision.include_nodes / exclude_nodes mean, on real graphs."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from head_graphs import concat_conv
from quantkit.backends.runners import calibration_runner
from quantkit.calibrate import collect_stats, compute_ranges, make_calibrator
from quantkit.errors import ConfigError
from quantkit.graph.model_graph import ModelGraph
from quantkit.run.artifact import build_artifact
from quantkit.run.context import RunContext
from quantkit.run.plans import plan_for_ranges
from quantkit.run.scope import quant_scope


def _with_precision(ctx, **kw):
    s = ctx.settings
    return dataclasses.replace(ctx, settings=dataclasses.replace(
        s, precision=dataclasses.replace(s.precision, **kw)))


def test_scope_of_the_tiny_text_model(scope):
    assert [t.node for t in scope.targets] == ["fc1", "fc2"]
    assert scope.tensors == ("pooled", "hr") and scope.extra_tensors == ()
    assert scope.compare_tensors == ("pooled", "h", "hr", "z") and scope.quant_nodes == 2


@pytest.mark.parametrize("include, exclude, nodes", [
    (["fc1"], [], ["fc1"]),  # a plain name selects exactly that node
    (["fc."], [], ["fc1", "fc2"]),  # a regex over the whole name
    ([], ["fc2"], ["fc1"]),
    ([".*"], ["f.1"], ["fc2"]),
])
def test_include_exclude_are_whole_name_regexes(ctx, include, exclude, nodes):
    c = _with_precision(ctx, include_nodes=include, exclude_nodes=exclude)
    assert [t.node for t in quant_scope(c).targets] == nodes


def test_a_pattern_matching_no_node_is_an_error_naming_close_nodes(ctx):
    with pytest.raises(ConfigError, match="precision.include_nodes") as err:
        quant_scope(_with_precision(ctx, include_nodes=["fc"]))  # no partial matches
    assert "fc1" in err.value.fix or "fc2" in err.value.fix


def test_plan_uses_the_same_patterns(ctx, calibration):
    c = _with_precision(ctx, op_types=["MatMul"], exclude_nodes=["fc.*"])
    plan = plan_for_ranges(c, calibration.ranges["minmax"], None)
    assert plan.int8_nodes() == [] and plan.decisions["fc1"].reason.startswith("excluded")
    c = _with_precision(ctx, include_nodes=["fc1"])
    assert plan_for_ranges(c, calibration.ranges["minmax"], None).int8_nodes() == ["fc1"]
    with pytest.raises(ConfigError, match="matches no node") as err:
        plan_for_ranges(_with_precision(ctx, exclude_nodes=["fc3"]),
                        calibration.ranges["minmax"], None)
    assert "fc1" in err.value.fix  # close names suggested


def test_residual_skip_inputs_are_in_the_scope(tmp_path, ctx):
    from test_app_images import residual_cnn

    residual_cnn(tmp_path / "cnn.onnx")
    graph = ModelGraph.build(onnx.load(str(tmp_path / "cnn.onnx")))
    c = dataclasses.replace(ctx, graph=graph)
    s = quant_scope(c)
    # TRT rule 6: the residual Add's skip input r1 is calibrated (it also feeds conv2)
    assert "r1" in s.tensors and s.quant_nodes == 3
    ort = quant_scope(dataclasses.replace(c, settings=dataclasses.replace(c.settings,
                                                                          target="ort_cpu")))
    assert set(s.extra_tensors) < set(ort.extra_tensors)  # + the outputs ORT CPU fuses
    assert isinstance(c, RunContext)


def test_concat_inputs_are_calibrated_and_the_run_plan_keeps_a_mixed_concat_reader_fp16(
        tmp_path, ctx):
    """Issue 46 through the run's own path: the scope calibrates the inputs of a Concat an
    INT8 Conv reads, real calibration ranges them (~500x apart), plan_for_ranges keeps the
    Conv FP16 at precision.concat_range_ratio, and build_artifact's lint passes."""
    model = concat_conv(wide=500.0, output="logits")
    graph = ModelGraph.build(model)
    c = dataclasses.replace(ctx, graph=graph, run_dir=tmp_path)
    s = quant_scope(c)
    assert s.tensors == ("x", "feat", "a", "b_wide") and s.extra_tensors == ("a", "b_wide")
    rng = np.random.default_rng(0)
    batches = [{"x": rng.standard_normal((4, 16, 8, 8)).astype(np.float32)} for _ in range(3)]
    stats = collect_stats(model, batches, list(s.tensors), progress=False,
                          runner_factory=calibration_runner).stats
    ranges = compute_ranges(stats, {"minmax": make_calibrator("minmax")})["minmax"]
    plan = plan_for_ranges(c, ranges, None, graph)
    assert plan.int8_nodes() == ["conv_a", "conv_b"]
    assert "feat_concat" in plan.decisions["conv_c"].reason
    artifact = build_artifact(c, "int8.minmax", plan, graph=graph)
    assert artifact.lint["violations"] == 0
    loose = _with_precision(c, concat_range_ratio=1e4)
    assert plan_for_ranges(loose, ranges, None, graph).int8_nodes() == ["conv_a", "conv_b",
                                                                        "conv_c"]
