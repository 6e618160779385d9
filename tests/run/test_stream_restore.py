"""Residual-stream scaling inside a run (issue 28, point 2, for the stream rewrite): on a small
real CNN with a residual Add, ``ptq.stream_alpha`` scales the stream, the rewrite is proven
on the run's calibration data, and a plan that keeps every weighted node in FP16, built from
the rewritten graph, computes exactly what the fp16 candidate computes (the stream's Convs get
their original weights back)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_graphs import cnn_run_context, save_cnn
from quantkit.backends.batched import run_split


def residual_cnn(path) -> None:
    """conv_a (3->8, channels 1 and 5 ten times the rest: the stream s0) -> conv_b (8->16) ->
    Relu -> conv_c (16->8) -> Add(s0, .) -> conv_d (8->8) -> GAP -> Gemm head: the stream
    {s0, c, s1} is written by conv_a / conv_c and read by conv_b / conv_d."""
    rng = np.random.default_rng(0)
    gains = np.ones(8, np.float32)
    gains[[1, 5]] = 10.0
    wa = (rng.standard_normal((8, 3, 3, 3)) * 0.2 * gains[:, None, None, None]).astype(np.float32)
    ba = (rng.standard_normal(8) * 0.1).astype(np.float32)
    wb = (rng.standard_normal((16, 8, 1, 1)) * 0.3).astype(np.float32)
    wc = (rng.standard_normal((8, 16, 1, 1)) * 0.3).astype(np.float32)
    wd = (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)
    fc = np.stack([np.ones(8), -np.ones(8)]).astype(np.float32) / 4
    inits = {"wa": wa, "ba": ba, "wb": wb, "wc": wc, "wd": wd, "fc": fc,
             "fb": np.array([-1.0, 1.0], np.float32)}
    nodes = [helper.make_node("Conv", ["input", "wa", "ba"], ["s0"], name="conv_a",
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["s0", "wb"], ["b"], name="conv_b"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "wc"], ["c"], name="conv_c"),
             helper.make_node("Add", ["s0", "c"], ["s1"], name="add"),
             helper.make_node("Conv", ["s1", "wd"], ["d"], name="conv_d"),
             helper.make_node("GlobalAveragePool", ["d"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="head", transB=1)]
    save_cnn(nodes, inits, path, "residual_cnn")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from quantkit.run.stages.ptq import ptq as apply_ptq
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
    from quantkit.run.stages.artifacts import artifacts as build_artifacts
    from quantkit.run.stages.calibration import calibration as calibrate
    from quantkit.run.stages.fp16_range_check import fp16_range_check as check_fp16_range
    from quantkit.run.scope import quant_scope

    root = tmp_path_factory.mktemp("residual")
    residual_cnn(root / "cnn.onnx")
    c = cnn_run_context(root, root / "cnn.onnx", "residual", "ptq.recipe=custom",
                        "ptq.stream_alpha=0.5", "ptq.range_search=true")
    overflow = check_fp16_range(c)
    sources = apply_ptq(c, quant_scope(c), overflow, evaluate_reference(c))
    source = sources.int8
    return c, source, build_artifacts(c, calibrate(c, sources), overflow, sources)


def _weight(model, node):
    n = next(x for x in model.graph.node if x.name == node)
    return numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == n.input[1]))


def _outputs(c, art):
    model = art.emulated() if art.emulated is not None else onnx.load(art.path)
    with c.runner(model, name="t") as r:
        return run_split(r, c.feeds, c.splits.dev, output=c.model.output_name, batch_size=8,
                         progress=False)


def test_the_stream_is_scaled_and_proven(built):
    c, source, _ = built
    assert [s.name for s in source.steps] == ["stream_scaling"] and source.is_rewritten
    step = source.steps[0]
    assert list(step.changes) == ["s1"] and "3 tensors, 2 writer / 2 reader Convs" in \
        step.changes["s1"]
    assert set(step.groups[0]) == {"conv_a", "conv_c", "conv_b", "conv_d", "add"}
    assert [p.step for p in source.proofs] == ["stream_scaling"] and source.proofs[0].kept
    assert source.recipe.describe().startswith("stream0.5")
    assert not np.array_equal(_weight(source.graph.model, "conv_a"),
                              _weight(source.original.model, "conv_a"))


def test_every_weighted_node_in_fp16_is_exactly_the_fp16_candidate(built, tmp_path):
    from quantkit.run.artifact import build_variant

    c, source, arts = built
    base = arts["int8.minmax"]
    plan = base.plan.with_precision(base.plan.int8_nodes(), c.settings.precision.remainder,
                                    "test: every node FP16")
    variant = build_variant(c, "allfp16", base, plan, source, arts["fp16"].plan,
                            out_dir=tmp_path)
    assert not variant.plan.int8_nodes()
    np.testing.assert_array_equal(_outputs(c, variant), _outputs(c, arts["fp16"]))


def test_a_bad_stream_alpha_is_one_config_error():
    import quantkit
    from quantkit.errors import ConfigError
    from quantkit.settings import build

    cfg = quantkit.compose(["ptq.recipe=custom", "ptq.stream_alpha=1.5"])
    with pytest.raises(ConfigError, match="ptq.stream_alpha must be in"):
        build(cfg)
