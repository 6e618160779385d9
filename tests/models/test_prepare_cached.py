"""The one prepared-model cache flow (models/export.py: prepare_cached) through the text
recipes, with a tiny random BERT built in code and the pinned MiniLM tokenizer."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from quantkit.backends.ort import OrtRunner
from quantkit.models.torch_export import (prepare_text_classifier, prepare_text_encoder,
                                    prepared_key)


def test_prepared_key_is_the_sorted_json_digest():
    """The folder suffix of a warm cache: 16 hex digits of sha256(sorted JSON of the inputs)."""
    src = {"v": "1", "encoder": "abc", "labels": ["neg", "pos"], "C": 1.0}
    expected = hashlib.sha256(json.dumps(src, sort_keys=True).encode()).hexdigest()[:16]
    assert prepared_key(src) == expected
    assert prepared_key(dict(reversed(list(src.items())))) == expected
    assert prepared_key({**src, "C": 2.0}) != expected


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from quantkit.assets import asset_path

    tokenizer = asset_path("minilm", None)  # the pinned MiniLM directory: its tokenizer only
    folder = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64)
    transformers.BertModel(cfg).save_pretrained(folder)
    return folder, str(tokenizer)


def _train(n: int = 120):
    rng = np.random.default_rng(0)
    words = ["good", "bad", "great", "awful", "film", "plot", "fine", "dull"]
    texts = [" ".join(rng.choice(words, 6)) for _ in range(n)]
    labels = np.array([int("good" in t or "great" in t) for t in texts])
    return SimpleNamespace(texts=texts, labels=labels, sha256="tiny-train-0")


def test_text_classifier_is_built_once_then_read_from_the_cache(tiny_bert, tmp_path, caplog):
    encoder, tokenizer = tiny_bert
    cfg = SimpleNamespace(name="tiny_bert", opset=17, pooling="mean", trust_remote_code=False,
                          head=SimpleNamespace(C=1.0, max_iter=200, standardize=False))
    kw = dict(encoder=str(encoder), encoder_sha="tiny-enc", tokenizer_path=tokenizer,
              train=_train(), label_names=["neg", "pos"], cfg=cfg, cache_dir=tmp_path,
              max_length=32, batch_size=32, progress=False, source="test")
    model = prepare_text_classifier(**kw)
    folder = Path(model.path).parent
    assert not model.cached and folder.parent == tmp_path / "models"
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "model.onnx"]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no tmp left
    meta = json.loads((folder / "meta.json").read_text())
    assert folder.name == f"tiny_bert-{prepared_key(meta['key_source'])}" == f"tiny_bert-{meta['key']}"
    assert meta["key_source"]["labels"] == ["neg", "pos"]
    proto = onnx.load(model.path)
    assert proto.graph.node[-1].op_type == "Gemm" and model.output_name == "logits"
    with OrtRunner(model.path) as r:  # binary head: two logits
        ids = np.ones((3, 8), dtype=np.int64)
        assert r.infer({"input_ids": ids, "attention_mask": ids})["logits"].shape == (3, 2)

    with caplog.at_level(logging.INFO, logger="quantkit.models.torch_export"):
        again = prepare_text_classifier(**kw)
    assert again.cached and again.path == model.path and again.sha256 == model.sha256
    assert "using cached prepared model" in caplog.text
    other = prepare_text_classifier(**{**kw, "max_length": 16})  # an input of the key
    assert not other.cached and other.path != model.path


def test_text_encoder_has_token_states_and_no_head(tiny_bert, tmp_path):
    encoder, tokenizer = tiny_bert
    cfg = SimpleNamespace(name="tiny_encoder", opset=17, pooling="mean", trust_remote_code=False)
    kw = dict(encoder=str(encoder), encoder_sha="tiny-enc", tokenizer_path=tokenizer, cfg=cfg,
              cache_dir=tmp_path, source="test")
    model = prepare_text_encoder(**kw)
    assert not model.cached and model.label_names == []
    assert [o.name for o in onnx.load(model.path).graph.output] == ["token_embeddings",
                                                                     "embedding"]
    again = prepare_text_encoder(**kw)
    assert again.cached and again.sha256 == model.sha256
