"""Stage prepare: splits, model, feeds and the ModelGraph of the tiny world."""

from __future__ import annotations

import pytest

from quantkit.record.serde import encode
from quantkit.errors import QuantkitError
from quantkit.run.stages.preflight import preflight as check_preflight
from quantkit.run.stages.data import data as load_data
from quantkit.run.context import make_context
from quantkit.run.stages.model import model as prepare_model


def test_prepare_builds_one_model_graph(ctx):
    g = ctx.graph
    assert g.node_names[:2] == ("embed", "mask_cast")
    assert g.infos["h"].elem_type == 1 and g.infos["h"].shape[-1] == 16
    assert g.producer_name("h") == "fc1" and [n.name for n in g.consumers["h"]] == ["relu"]
    assert "w1" in g.constants and len(g.sha256) == 64
    assert "logits" in g.float32_outputs() and "mask3" in g.float32_outputs()


def test_prepared_records(tiny, tmp_path):
    from runworld import settings_for

    s = settings_for(tiny, "stage_cache=false")
    c = make_context(s, tmp_path, tmp_path / "cache")
    splits = load_data(c)
    p = prepare_model(c, splits)
    data = encode(p.data_record(s))  # record.data as the run writes it
    assert data["sizes"] == splits.sizes() and data["label_names"] == ["neg", "pos"]
    assert "kind" not in data and "feeds" not in data  # text records keep their original keys
    assert p.model_record().sha256 == p.model.sha256
    assert {k: len(v) for k, v in p.lengths.items()} == {"dev": len(splits.dev),
                                                          "test": len(splits.test)}


def test_preflight_names_a_missing_model_file(tiny, tmp_path):
    from runworld import settings_for

    s = settings_for(tiny, f"model.path={tmp_path / 'missing.onnx'}")
    with pytest.raises(QuantkitError, match="missing.onnx"):
        check_preflight(make_context(s, tmp_path, tmp_path / "cache"))


@pytest.mark.parametrize("max_length, truncated", [(4, True), (64, False)])
def test_data_record_counts_truncated_texts(tiny, tmp_path, max_length, truncated):
    """Texts longer than data.max_length are counted per split in record.data.info (and the
    summary's data warning), not only dropped silently by the tokenizer."""
    from runworld import settings_for

    s = settings_for(tiny, "stage_cache=false", f"data.max_length={max_length}")
    c = make_context(s, tmp_path, tmp_path / "cache")
    splits = load_data(c)
    data = encode(prepare_model(c, splits).data_record(s))
    counts = data["info"]["truncated"]
    assert set(counts) == set(splits.sizes()) and data["info"]["max_length"] == max_length
    lengths = {k: int(v) for k, v in counts.items()}
    codes = {w["code"] for w in data["info"]["warnings"]}
    if truncated:
        assert lengths["test"] > 0 and "texts_truncated" in codes
    else:
        assert sum(lengths.values()) == 0 and "texts_truncated" not in codes
    assert data["label_free"] is False
