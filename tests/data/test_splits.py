"""Loading local files through datasets, seeded disjoint splits, hashes, and data errors."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from quantkit.data.sources import load_local
from quantkit.data.splits import TextSplit, make_splits
from quantkit.data.table import to_examples
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
                group_column="film", label_names=["neg", "pos"], test_fraction=0.25)
    base.update(kw)
    c = DataConfig(**{k: v for k, v in base.items() if k not in ("calib_n", "limit", "dev_limit",
                                                                  "train_size", "dev_size")})
    c.calib.num_samples = kw.get("calib_n", 32)
    c.test.limit = kw.get("limit")
    c.dev.limit = kw.get("dev_limit")
    c.train.size = kw.get("train_size")
    c.dev.size = kw.get("dev_size")
    return c


def splits_of(path, c, seed=0, **kw):
    ex = to_examples(load_local(path), c)
    return make_splits(TextSplit("all", ex.texts, ex.labels, ex.groups), ex.label_names, c,
                       seed=seed, info=ex.info, **kw)


def test_group_split_is_disjoint_seeded_and_hashed(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    a, b = splits_of(p, cfg()), splits_of(p, cfg())
    assert a.hashes() == b.hashes() and set(a.hashes()) == {"train", "calib", "dev", "test"}
    named = a.named()
    for x in named:
        for y in named:
            if x < y:
                assert not set(named[x].groups) & set(named[y].groups), (x, y)
                assert not set(named[x].texts) & set(named[y].texts), (x, y)
    assert sum(a.sizes().values()) + a.info.unused == 400
    assert len(a.calib) == 32
    assert 0.15 < len(a.test) / 400 < 0.4 and 0.1 < len(a.dev) / 400 < 0.35
    c = splits_of(p, cfg(), seed=1)
    assert c.hashes()["test"] != a.hashes()["test"] and c.hashes()["dev"] != a.hashes()["dev"]
    assert set(a.train.labels.tolist()) == {0, 1}
    # groups per example for a cluster bootstrap: the film of each review
    codes = a.test.group_ids()
    assert codes.shape == (len(a.test),) and codes.min() == 0
    assert len(np.unique(codes)) == len(set(a.test.groups)) < len(a.test)


def test_eval_is_a_read_only_alias_of_test(tmp_path):
    s = splits_of(write_csv(tmp_path / "d.csv"), cfg())
    assert s.eval is s.test
    with pytest.raises(AttributeError):
        s.eval = s.dev


def test_train_size_and_dev_as_the_rest(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    s = splits_of(p, cfg(train_size=100, dev_fraction=None, calib_n=20))
    assert len(s.train) == 100 and len(s.calib) == 20
    assert len(s.train) + len(s.calib) + len(s.dev) + len(s.test) + s.info.unused == 400
    assert s.info.unused < 40  # only trimmed parts of the train and calib groups
    d = splits_of(p, cfg(dev_size=60))
    assert 60 <= len(d.dev) < 60 + 30  # whole films: up to one film above the target


def test_dev_and_test_limits_are_seeded_stratified_subsamples(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    full = splits_of(p, cfg())
    s = splits_of(p, cfg(limit=10, dev_limit=8, calib_n=8))
    assert len(s.test) == 10 and len(s.dev) == 8 and len(s.calib) == 8
    assert set(s.test.texts) <= set(full.test.texts)
    share = np.bincount(full.test.labels, minlength=2) / len(full.test)
    assert np.all(np.abs(np.bincount(s.test.labels, minlength=2) - 10 * share) < 1)
    assert s.info.limits["test"] == {"key": "data.test.limit", "before": len(full.test),
                                     "after": 10, "stratified": True}
    assert splits_of(p, cfg(limit=10, calib_n=8), seed=3).test.texts != s.test.texts


def test_deprecated_eval_keys_still_work(tmp_path):
    p = write_csv(tmp_path / "d.csv")
    c = cfg(test_fraction=None, eval_fraction=0.25)
    c.eval.limit = 12
    s = splits_of(p, c)
    assert len(s.test) == 12 and s.info.limits["test"]["key"] == "data.eval.limit"
    assert splits_of(p, cfg()).hashes()["dev"] == s.hashes()["dev"]


@pytest.mark.parametrize("kw,needle", [
    (dict(text_column="body"), "data.text_column"),
    (dict(label_column="stars"), "data.label_column=null"),
    (dict(calib_n=100000), "data.calib.num_samples"),
    (dict(label_names=["neg"]), "label"),
    (dict(test_fraction=0.001), "data.test_fraction"),
    (dict(dev_fraction=None), "data.dev_fraction"),
])
def test_data_errors_are_clear(tmp_path, kw, needle):
    p = write_csv(tmp_path / "d.csv")
    with pytest.raises(DataError) as err:
        splits_of(p, cfg(**kw))
    assert needle in str(err.value) and "Fix:" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_local(tmp_path / "nope.csv")


def test_json_and_parquet_load(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f"], "label": [0, 1, 0]})
    ds.to_json(str(tmp_path / "d.jsonl"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    for f in ("d.jsonl", "d.parquet"):
        ex = to_examples(load_local(tmp_path / f), DataConfig(name="x"))
        assert ex.texts == ["a b", "c d", "e f"] and ex.labels.tolist() == [0, 1, 0]
        assert ex.label_names == ["0", "1"]


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


def test_rotten_tomatoes_splits_of_bert_int8():
    """The real data: 12,752 snippets of 507 movies -> train 3,000 / calib 256 / dev / test,
    no movie in two splits, seeded, every snippet accounted for."""
    import quantkit
    from quantkit.assets import cache_root
    from quantkit.data import load_splits

    s = quantkit.configure(["experiment=bert_int8"])
    splits = load_splits(s, cache_dir=cache_root())
    sizes = splits.sizes()
    assert sizes["train"] == 3000 and sizes["calib"] == 256
    assert sizes["test"] >= 6000 and sizes["dev"] >= 2500
    assert sum(sizes.values()) + splits.info.unused == 12752
    movies = {n: set(x.groups) for n, x in splits.named().items()}
    assert sum(len(m) for m in movies.values()) == len(set().union(*movies.values())) == 507
    assert splits.info.group_column == "movie_name" and splits.info.grouped
    assert splits.info.dropped_by_value > 0  # the "plot" rows
    assert len(np.unique(splits.test.group_ids())) == len(movies["test"]) > 200
    assert splits.eval is splits.test and set(splits.test.labels.tolist()) == {0, 1}
    full = TextSplit("all", [t for x in splits.named().values() for t in x.texts],
                     np.concatenate([x.labels for x in splits.named().values()]),
                     [g for x in splits.named().values() for g in x.groups])
    a = make_splits(full, splits.label_names, s.data, seed=0)
    b = make_splits(full, splits.label_names, s.data, seed=0)
    c = make_splits(full, splits.label_names, s.data, seed=1)
    assert a.hashes() == b.hashes() and a.hashes()["test"] != c.hashes()["test"]


def test_calibration_follows_the_data_without_a_head(tmp_path):
    """With no head to fit on train (a ready ONNX model), a request beyond what test and dev
    leave calibrates on all of it, with a named warning; test and dev are the same as with a
    request that fits. With a head (the default) the same request is refused (above)."""
    p = write_csv(tmp_path / "d.csv")
    fits = splits_of(p, cfg(), calib_fits_data=True)
    big = splits_of(p, cfg(calib_n=100000), calib_fits_data=True)
    assert "calib_smaller_than_requested" in big.info.warning_codes()
    assert "calib_smaller_than_requested" not in fits.info.warning_codes()
    assert 32 < len(big.calib) < 400 and len(big.train) == 0
    assert big.hashes()["test"] == fits.hashes()["test"]
    assert big.hashes()["dev"] == fits.hashes()["dev"]
