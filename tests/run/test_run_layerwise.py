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
