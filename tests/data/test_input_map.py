"""BYO text models whose inputs have other names: model.inputs.* maps the tokenizer's fields
(input_ids, attention_mask, token_type_ids) to them; mismatches are one error before any
inference. Real ONNX graphs built in code, real ORT sessions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

import tinyworld  # noqa: E402
from tinyworld import embedding_model  # noqa: E402

from quantkit.backends.batched import run_split  # noqa: E402
from quantkit.backends.ort import OrtRunner  # noqa: E402
from quantkit.data.feeds import TextFeeds  # noqa: E402
from quantkit.data.text import TextEncoder, load_tokenizer  # noqa: E402
from quantkit.errors import DataError  # noqa: E402
from quantkit.data.text_inputs import check_text_inputs  # noqa: E402
from quantkit.settings import InputsConfig  # noqa: E402


def test_mapped_names_feed_the_same_numbers(tmp_path):
    tok = load_tokenizer(str(tinyworld.write_tokenizer(tmp_path / "tok.json")))
    texts = [r["text"] for r in tinyworld.rows(17)]
    std, other = tmp_path / "std.onnx", tmp_path / "other.onnx"
    onnx.save(tinyworld.text_model(), str(std))
    onnx.save(tinyworld.text_model(input_names=("ids", "mask")), str(other))
    fields = check_text_inputs(["ids", "mask"], InputsConfig(input_ids="ids", attention_mask="mask"))
    assert fields == {"input_ids": "ids", "attention_mask": "mask"}
    enc = TextEncoder(tok, max_length=32, input_names=["ids", "mask"], input_map=fields)
    assert set(enc.encode(texts[:2])) == {"ids", "mask"} and enc.mask_input() == "mask"
    base = TextEncoder(tok, max_length=32, input_names=["input_ids", "attention_mask"])
    with OrtRunner(std, name="std") as r:
        a = run_split(r, TextFeeds(base), texts, output="logits", batch_size=4, progress=False)
    with OrtRunner(other, name="other") as r:
        b = run_split(r, TextFeeds(enc), texts, output="logits", batch_size=4, progress=False)
    assert np.array_equal(a, b)


def test_token_type_ids_fed_only_when_the_model_has_it(tmp_path):
    tok = load_tokenizer(str(tinyworld.write_tokenizer(tmp_path / "tok.json")))
    without = check_text_inputs(["input_ids", "attention_mask"], InputsConfig())
    assert "token_type_ids" not in without
    with_segs = check_text_inputs(["ids", "mask", "segs"], InputsConfig(
        input_ids="ids", attention_mask="mask", token_type_ids="segs"))
    assert with_segs["token_type_ids"] == "segs"
    path = tmp_path / "segs.onnx"
    onnx.save(embedding_model(input_names=("ids", "mask"), token_type_ids="segs"), str(path))
    enc = TextEncoder(tok, max_length=16, input_names=["ids", "mask", "segs"], input_map=with_segs)
    with OrtRunner(path, name="segs") as r:
        out = run_split(r, TextFeeds(enc), ["good film", "bad plot very dull"],
                        output="sentence", batch_size=2, progress=False)
    assert out.shape == (2, tinyworld.DIM) and np.isfinite(out).all()


@pytest.mark.parametrize("names, cfg, setting, value", [
    (["ids", "mask"], InputsConfig(), "model.inputs", "ids"),
    (["ids", "mask"], InputsConfig(input_ids="ids", attention_mask="msk"),
     "model.inputs.attention_mask", "msk"),
    (["ids", "mask"], InputsConfig(input_ids="ids", attention_mask="mask",
                                   token_type_ids="segs"), "model.inputs.token_type_ids", "segs"),
    (["attention_mask"], InputsConfig(), "model.inputs.input_ids", "attention_mask"),
])
def test_mismatch_names_the_models_inputs_and_the_setting(names, cfg, setting, value):
    with pytest.raises(DataError) as e:
        check_text_inputs(names, cfg)
    msg = str(e.value)
    assert f"at {setting};" in msg and value in msg and str(names) in msg
    assert "\n" not in msg


def test_cli_run_with_mapped_input_names(tmp_path):
    """A full tiny-world run on a model whose inputs are ids / mask, mapped by config."""
    w = tinyworld.make_world(tmp_path / "w")
    onnx.save(tinyworld.text_model(input_names=("ids", "mask")), str(w["model"]))
    args = tinyworld.override(tinyworld.cli_args(w), f"hydra.run.dir={w['run']}",
                              "model.inputs.input_ids=ids", "model.inputs.attention_mask=mask",
                              "precision.search.enabled=false")
    r = tinyworld.run_quantkit(args, cwd=w["root"])
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads((w["run"] / "record.json").read_text())
    assert rec["model"]["input_names"] == ["ids", "mask"]
    assert rec["candidates"]["fp32"]["metrics"]["accuracy"] > 0.7
    r2 = tinyworld.run_quantkit(tinyworld.override(args, "model.inputs.attention_mask=msk",
                                                   f"hydra.run.dir={w['root'] / 'r2'}"),
                                cwd=w["root"])
    assert r2.returncode == 2 and "model.inputs.attention_mask" in r2.stderr
    assert not (w["root"] / "r2" / "record.json").exists()
