"""The Concat rule (issue 46) on real graphs and real ONNX Runtime sessions: no Q/DQ puts a
Concat's inputs of different meaning under one scale. The lint names the single Q/DQ that
quantize-everything tools write after a box / score Concat; quantkit's plan (build_plan ->
qdq/realize.py) writes a Q/DQ per input before the Concat, or keeps its readers FP16, and
the scores keep their resolution where the naive graph rounds every one to 0."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from head_graphs import concat_conv, detector_head, qdq_after
from qdq_graphs import max_abs_ranges, random_feed, run
from quantkit.cli.lint_cmd import main as lint_main
from quantkit.errors import ConfigError
from quantkit.graph.grids import INT8_MAX
from quantkit.graph.mixed_concat import DEFAULT_CONCAT_RANGE_RATIO, mixed_concats
from quantkit.precision.plan import Precision, build_plan
from quantkit.qdq.lint import ORT_CPU_RULES, RULES, lint_for_target, lint_qdq
from quantkit.qdq.realize import Realization, realize

TRT_FP16 = Realization(target="tensorrt", remainder="fp16")


@pytest.fixture(scope="module")
def head():
    model = detector_head()
    feeds = [random_feed(model, s) for s in range(3)]
    return model, max_abs_ranges(model, feeds), random_feed(model, 7)


def _concat_violations(model, **kw):
    return [v for v in lint_qdq(model, **kw) if v.rule == "concat-shared-scale"]


def _reads_concat_output_through_q(model, concat_output):
    """True if a QuantizeLinear reads ``concat_output`` (or a Cast of it)."""
    casts = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Cast"}
    return any(n.op_type == "QuantizeLinear"
               and casts.get(n.input[0], n.input[0]) == concat_output for n in model.graph.node)


def test_the_rule_is_in_both_rule_sets():
    assert "concat-shared-scale" in RULES and "concat-shared-scale" in ORT_CPU_RULES


def test_lint_names_one_qdq_after_a_box_score_concat(head):
    model, amax, _ = head
    assert amax["boxes"] > 500 and amax["scores"] < 1  # pixels beside scores
    naive = qdq_after(model, "head_cat", amax["head_cat"])
    v = _concat_violations(naive, activation_amax=amax)
    assert [x.node for x in v] == ["head_cat__naive_QuantizeLinear"]
    msg = v[0].message
    ratio = amax["boxes"] / amax["scores"]
    for part in ("head_concat", "boxes (amax", "scores (amax", "Sigmoid", f"{ratio:.4g}x",
                 "box-like and score-like", "before the Concat", "FP16"):
        assert part in msg, part
    # without calibrated ranges the box / score structure alone names it
    v = _concat_violations(naive)
    assert len(v) == 1 and "amax unknown" in v[0].message and "box-like" in v[0].message
    # the same rule in the ort_cpu rule set
    assert any(x.rule == "concat-shared-scale"
               for x in lint_for_target(naive, "ort_cpu", activation_amax=amax))


def test_planned_head_quantizes_each_input_before_the_concat_and_keeps_the_scores(head):
    model, amax, feed = head
    naive = qdq_after(model, "head_cat", amax["head_cat"])
    # quantize-more config: the Concat itself in op_types -> INT8 with a Q/DQ per input
    plan = build_plan(model, amax=amax, op_types=("Conv", "Concat"))
    assert plan.decisions["head_concat"].precision is Precision.INT8
    assert "head_cat" not in plan.activation_amax  # no writer can give it one scale
    graph = realize(model, plan, TRT_FP16, numerics="deployed")
    concat = next(n for n in graph.graph.node if n.op_type == "Concat")
    producers = {o: n for n in graph.graph.node for o in n.output}
    assert [producers[t].op_type for t in concat.input] == ["DequantizeLinear"] * 2
    scales = {onnx.numpy_helper.to_array(i).item() for i in graph.graph.initializer
              if i.name in {producers[t].input[1] for t in concat.input}}
    assert len(scales) == 2  # its own scale per input
    assert not _reads_concat_output_through_q(graph, "head_cat")
    assert lint_qdq(graph, activation_amax=plan.activation_amax) == []

    ref = run(model, feed)["head"][:, 4:]
    ours = run(graph, feed, qdq=True)["head"][:, 4:]
    single = run(naive, feed, qdq=True)["head"][:, 4:]
    assert np.all(ref > 0) and ref.max() < 1
    # one scale for pixels and scores: every score rounds to 0
    assert np.all(single == 0)
    # a scale of their own: the scores keep their resolution (FP32 within ~1 INT8 step)
    step = amax["scores"] / INT8_MAX
    assert np.count_nonzero(ours) == ours.size
    assert np.max(np.abs(ours - ref)) < 2 * step
    assert np.corrcoef(ours.ravel(), ref.ravel())[0, 1] > 0.99
    assert len(np.unique(ours)) > 20


def test_default_plan_leaves_the_head_concat_unquantized(head):
    """Default op_types (weighted ops only): the head's Concat stays FP16, nothing after it is
    quantized, the scores match FP32 to FP16 rounding plus the convs' INT8 error."""
    model, amax, feed = head
    plan = build_plan(model, amax=amax)
    assert plan.decisions["head_concat"].precision is Precision.FP16
    graph = realize(model, plan, TRT_FP16, numerics="deployed")
    assert not _reads_concat_output_through_q(graph, "head_cat")
    assert lint_qdq(graph, activation_amax=plan.activation_amax) == []
    ref, ours = run(model, feed)["head"][:, 4:], run(graph, feed, qdq=True)["head"][:, 4:]
    assert np.max(np.abs(ours - ref)) < 2 * amax["scores"] / INT8_MAX


def test_a_reader_of_a_wide_ratio_concat_stays_fp16_and_the_naive_plan_is_named():
    """Ratio only (no scores): two conv outputs ~500x apart concatenated into a Conv."""
    model = concat_conv(wide=500.0)
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(3)])
    ratio = amax["b_wide"] / amax["a"]
    assert ratio > DEFAULT_CONCAT_RANGE_RATIO
    plan = build_plan(model, amax=amax)
    assert plan.int8_nodes() == ["conv_a", "conv_b"]
    d = plan.decisions["conv_c"]
    assert d.precision is Precision.FP16
    for part in ("feat_concat", "a (amax", "b_wide (amax", f"{ratio:.4g}x", "round"):
        assert part in d.reason, part
    graph = realize(model, plan, TRT_FP16, numerics="deployed")
    assert not _reads_concat_output_through_q(graph, "feat")
    assert lint_qdq(graph, activation_amax=plan.activation_amax) == []

    naive = build_plan(model, amax=amax, concat_range_ratio=None)  # the rule off
    assert naive.decisions["conv_c"].precision is Precision.INT8
    graph = realize(model, naive, TRT_FP16, numerics="deployed")  # Concat -> Cast -> Q
    v = _concat_violations(graph, activation_amax=amax)
    assert [x.node for x in v] == ["feat__QuantizeLinear_conv_c"]
    assert "feat_concat" in v[0].message and f"{ratio:.4g}x" in v[0].message
    assert "a (amax" in v[0].message  # named as before the FP16 boundary Cast


def test_a_concat_of_similar_ranges_stays_int8_unless_the_ratio_is_tighter():
    model = concat_conv(wide=4.0)
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(3)])
    plan = build_plan(model, amax=amax)
    assert plan.decisions["conv_c"].precision is Precision.INT8
    graph = realize(model, plan, TRT_FP16, numerics="deployed")
    assert lint_qdq(graph, activation_amax=plan.activation_amax) == []
    tight = build_plan(model, amax=amax, concat_range_ratio=2.0)
    assert tight.decisions["conv_c"].precision is Precision.FP16
    assert _concat_violations(graph, activation_amax=amax, concat_range_ratio=2.0)


def test_the_lint_reads_ranges_from_the_dqs_feeding_the_concat():
    """ModelOpt-style graph (DQ -> Concat -> Q): without calibrated ranges the ratio comes
    from the input DQs' scales."""
    model = concat_conv(wide=500.0)
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(3)])
    per_input = qdq_after(qdq_after(model, "a", amax["a"]), "b_wide", amax["b_wide"])
    assert _concat_violations(per_input) == []  # a scale per input: fine
    both = qdq_after(per_input, "feat", amax["feat"])
    v = _concat_violations(both)
    assert len(v) == 1 and "feat_concat" in v[0].message and "differ" in v[0].message


def test_nested_and_reshaped_concat_outputs_carry_the_mix(head):
    model, amax, _ = head
    mixed = mixed_concats(model.graph, amax)
    assert set(mixed) == {"head_cat", "head"}  # the Reshape copies it
    assert mixed["head"].concat == "head_concat" and mixed["head"].box_score


def test_forcing_int8_on_a_mixed_concat_reader_is_refused():
    model = concat_conv(wide=500.0)
    amax = max_abs_ranges(model, [random_feed(model, s) for s in range(3)])
    with pytest.raises(ConfigError, match="cannot force node conv_c to int8") as err:
        build_plan(model, amax=amax, force={"conv_c": "int8"})
    assert "feat_concat" in str(err.value) and "fp16" in err.value.fix


@pytest.mark.parametrize("bad", [1.0, 0.5, -3, float("inf"), float("nan"), "16", True])
def test_a_bad_ratio_is_refused(bad):
    model = concat_conv()
    with pytest.raises(ConfigError, match="concat_range_ratio must be a finite number > 1"):
        build_plan(model, amax={}, concat_range_ratio=bad)


def test_cli_lint_names_the_naive_head_and_refuses_a_bad_ratio(head, tmp_path, capsys):
    model, amax, _ = head
    path = tmp_path / "naive.onnx"
    onnx.save(qdq_after(model, "head_cat", amax["head_cat"]), str(path))
    assert lint_main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "concat-shared-scale head_cat__naive_QuantizeLinear" in out and "head_concat" in out
    assert lint_main([str(path), "--concat-range-ratio", "0.5"]) == 2
    assert "concat_range_ratio" in capsys.readouterr().err
