"""Stage layerwise: per-layer stats vs FP32, the FP16 floor, the first diverging node."""

from __future__ import annotations


def test_layers_of_every_candidate(ctx, scope, layers, artifacts):
    assert set(layers.layers) == set(artifacts) and layers.examples == 16
    for name, per in layers.layers.items():
        assert set(per) <= set(scope.compare_tensors) and per, name
        assert all(v["count"] > 0 for v in per.values())
    fp16, int8 = layers.layers["fp16"]["h"], layers.layers["int8.minmax"]["h"]
    assert int8["sqnr_db"] < fp16["sqnr_db"]  # INT8 noise is above the FP16 floor
    rec = layers.to_record("int8.minmax")
    assert set(rec) == {"layers", "flagged_layers", "first_diverging", "first_diverging_node"}
    if rec["first_diverging"]:
        assert rec["first_diverging_node"] == ctx.graph.producer_name(rec["first_diverging"])
    assert set(layers.to_record("fp16")) == {"layers"}


def test_fetching_tensors_in_chunks_gives_the_same_statistics(ctx, scope, layers, artifacts):
    """compare.max_outputs_per_run bounds memory by fetching the compared tensors in several
    passes over each batch: every statistic is the same as fetching all at once."""
    import dataclasses

    from quantkit.run.stages.layerwise import _run

    tensors = list(scope.compare_tensors)
    assert len(tensors) > 2
    subset = list(range(layers.examples))
    outs = {}
    for k in (1, 2, len(tensors)):
        c = dataclasses.replace(ctx, settings=dataclasses.replace(
            ctx.settings, compare=dataclasses.replace(ctx.settings.compare,
                                                      max_outputs_per_run=k)))
        outs[k] = _run(c, artifacts, tensors, subset)
    assert outs[1] == outs[2] == outs[len(tensors)]
    assert outs[1] == layers.layers  # the stage's (cached) result is the same numbers
