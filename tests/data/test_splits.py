"""Loading local files through datasets, seeded disjoint splits, hashes, and data errors."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from quantkit.data.sources import load_local
from quantkit.data.splits import make_splits, to_examples
from quantkit.data.text import TextEncoder, iter_feeds
from quantkit.errors import DataError
from quantkit.settings import DataConfig


def write_csv(path, n=400, groups=40):
    rng = np.random.default_rng(0)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "sentiment", "film"])
        for i in range(n):
            w.writerow([f"review number {i} is {'good' if i % 2 else 'bad'}",
                        "pos" if i % 2 else "neg", f"film{rng.integers(groups)}"])
    return path


def cfg(**kw) -> DataConfig:
    base = dict(name="t", source="local", text_column="review", label_column="sentiment",
                group_column="film", label_names=["neg", "pos"], eval_fraction=0.25)
    base.update(kw)
    c = DataConfig(**{k: v for k, v in base.items() if k not in ("calib_n", "limit")})
    c.calib.num_samples = kw.get("calib_n", 32)
    c.eval.limit = kw.get("limit")
    return c


def splits_of(path, c, seed=0):
    ds = load_local(path)
    t, y, g, names = to_examples(ds, c)
    return make_splits(t, y, g, names, c, seed=seed)


def test_group_split_is_disjoint_seeded_and_hashed(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    a, b = splits_of(p, cfg()), splits_of(p, cfg())
    assert a.hashes() == b.hashes()
    assert not set(a.train.groups) & set(a.eval.groups)
    assert set(a.calib.texts) <= set(a.train.texts)
    assert len(a.train) + len(a.eval) == 400
    assert 0.15 < len(a.eval) / 400 < 0.4
    c = splits_of(p, cfg(), seed=1)
    assert c.hashes()["eval"] != a.hashes()["eval"]
    assert set(a.train.labels.tolist()) == {0, 1}


def test_eval_limit_and_calib_count(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    s = splits_of(p, cfg(limit=10, calib_n=5))
    assert len(s.eval) == 10 and len(s.calib) == 5


@pytest.mark.parametrize("kw,needle", [
    (dict(text_column="body"), "data.text_column"),
    (dict(label_column="stars"), "data.label_column"),
    (dict(calib_n=100000), "data.calib.num_samples"),
    (dict(label_names=["neg"]), "label"),
])
def test_data_errors_are_clear(tmp_path, kw, needle):
    p = write_csv(tmp_path / "d.csv")
    with pytest.raises(DataError) as err:
        splits_of(p, cfg(**kw))
    assert needle in str(err.value) and "Fix:" in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_local(tmp_path / "nope.csv")


def test_json_and_parquet_load(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f"], "label": [0, 1, 0]})
    ds.to_json(str(tmp_path / "d.jsonl"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    for f in ("d.jsonl", "d.parquet"):
        t, y, _, names = to_examples(load_local(tmp_path / f), DataConfig(name="x"))
        assert t == ["a b", "c d", "e f"] and y.tolist() == [0, 1, 0] and names == ["0", "1"]


def word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "[PAD]": 1, "a": 2, "b": 3, "c": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def test_encoder_batches_by_length_and_pads():
    enc = TextEncoder(word_tokenizer(), max_length=4, input_names=["input_ids", "attention_mask"])
    texts = ["a b c a b c", "a", "b c", "c c c"]
    seen = []
    for idx, feed in iter_feeds(enc, texts, batch_size=2):
        assert set(feed) == {"input_ids", "attention_mask"}
        assert feed["input_ids"].shape == feed["attention_mask"].shape
        assert feed["input_ids"].shape[1] <= 4
        seen.extend(idx.tolist())
        for row, i in enumerate(idx):
            assert feed["attention_mask"][row].sum() == min(4, len(texts[i].split()))
    assert sorted(seen) == [0, 1, 2, 3] and seen[0] == 1  # shortest first


def test_encoder_refuses_unknown_input():
    with pytest.raises(DataError, match="pixel_values"):
        TextEncoder(word_tokenizer(), max_length=4, input_names=["pixel_values"])
