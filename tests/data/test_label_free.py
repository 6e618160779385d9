"""Label-free data: text files without a label column, image folders without class
subfolders, hub-style datasets without labels -> splits with labels None, flagged, and
feeds that still run a real ORT session."""

from __future__ import annotations

import csv

import numpy as np
import onnx
import pytest

from quantkit.backends.batched import run_split
from quantkit.backends.ort import OrtRunner
from quantkit.data import load_splits
from quantkit.data.feeds import ImageFeeds
from quantkit.data.images import ImagePreprocess, hub_images
from quantkit.data.sources import load_local
from quantkit.data.splits import TextSplit, make_splits, require_labels
from quantkit.data.table import to_examples
from quantkit.errors import ConfigError, DataError
from quantkit.settings import DataConfig, Settings

from test_feeds import tiny_cnn

Image = pytest.importorskip("PIL.Image")


def write_unlabeled_csv(path, n=200):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "author"])
        for i in range(n):
            w.writerow([f"review {i} says {'good' if i % 3 else 'bad'} things", f"a{i % 25}"])
    return path


def settings_for(**data) -> Settings:
    s = Settings()
    s.model.kind, s.model.name = "onnx", "m"
    s.data = DataConfig(**{"name": "mine", **data})
    s.data.calib.num_samples = 16
    return s


def test_csv_without_a_label_column(tmp_path):
    p = write_unlabeled_csv(tmp_path / "u.csv")
    s = settings_for(source="local", path=str(p), text_column="review", label_column=None,
                     group_column="author")
    splits = load_splits(s, cache_dir=tmp_path / "cache")
    assert splits.label_free and splits.info.label_free and "label_free" in splits.info.warning_codes()
    for split in splits.named().values():
        assert split.labels is None and split.label_free and len(split) > 0
    assert sum(splits.sizes().values()) + splits.info.unused == 200
    assert not set(splits.test.groups) & set(splits.dev.groups)
    again = load_splits(s, cache_dir=tmp_path / "cache")
    assert again.hashes() == splits.hashes()
    # a limit is a seeded random subsample (there is nothing to stratify by)
    s.data.test.limit = 7
    small = load_splits(s, cache_dir=tmp_path / "cache")
    assert len(small.test) == 7 and small.info.limits["test"]["stratified"] is False
    assert set(small.test.texts) <= set(splits.test.texts)
    with pytest.raises(ConfigError, match="label-free"):
        require_labels(splits, "verdict.metric=accuracy")


def test_label_free_hash_differs_from_labeled():
    a = TextSplit("t", ["x", "y"], None)
    b = TextSplit("t", ["x", "y"], [0, 0])
    assert a.sha256 != b.sha256 and a.sha256 == TextSplit("u", ["x", "y"], None).sha256


def test_a_misnamed_label_column_is_an_error_not_label_free(tmp_path):
    p = write_unlabeled_csv(tmp_path / "u.csv")
    with pytest.raises(DataError) as err:
        to_examples(load_local(p), DataConfig(name="x", text_column="review"))
    assert "data.label_column=null" in str(err.value) and "['review', 'author']" in str(err.value)


def test_image_folder_without_class_subfolders(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(40):
        Image.fromarray(rng.integers(0, 256, (10, 10, 3), dtype=np.uint8)).save(tmp_path / f"{i:02d}.png")
    s = settings_for(kind="image", source="local", path=str(tmp_path))
    s.data.image.size = 8
    s.data.calib.num_samples = 8
    splits = load_splits(s, cache_dir=tmp_path / "cache")
    assert splits.label_free and splits.sizes()["test"] == 8 and splits.sizes()["dev"] == 8
    assert splits.label_names == []
    model = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(size=8), str(model))
    feeds = ImageFeeds(ImagePreprocess(size=8))
    with OrtRunner(str(model)) as r:
        logits = run_split(r, feeds, splits.test, output="logits", batch_size=3)
    assert logits.shape == (8, 3) and np.isfinite(logits).all()
    # loose images beside class subfolders are ambiguous: refused with the fix
    (tmp_path / "cats").mkdir()
    Image.fromarray(np.zeros((10, 10, 3), np.uint8)).save(tmp_path / "cats" / "c.png")
    with pytest.raises(DataError) as err:
        load_splits(s, cache_dir=tmp_path / "cache")
    assert "both images and subfolders" in str(err.value) and "data.label_column=null" in str(err.value)
    s.data.label_column = None  # then every image, subfolders included, without labels
    assert sum(load_splits(s, cache_dir=tmp_path / "cache").sizes().values()) <= 41


def test_hub_style_datasets_without_labels(tmp_path):
    import datasets

    texts = datasets.Dataset.from_dict({"sentence": [f"s{i} fine" for i in range(30)]})
    ex = to_examples(texts, DataConfig(name="hub", source="hub", text_column="sentence",
                                       label_column=None))
    assert ex.labels is None and len(ex.texts) == 30 and ex.info.label_free
    c = DataConfig(name="hub", source="hub", label_column=None)
    c.calib.num_samples = 8
    splits = make_splits(TextSplit("all", ex.texts, ex.labels, ex.groups), ex.label_names, c,
                         seed=0, info=ex.info)
    assert splits.test.labels is None and len(splits.test) == 6

    rng = np.random.default_rng(1)
    imgs = [Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)) for _ in range(5)]
    ds = datasets.Dataset.from_dict({"image": imgs}, features=datasets.Features(
        {"image": datasets.Image()}))
    cfg = DataConfig(name="hub", kind="image", source="hub", label_column=None)
    cfg.image.size = 8
    x, y, names = hub_images(ds, cfg)
    assert x.shape == (5, 8, 8, 3) and y is None and names == []


def test_zoo_models_need_labels_for_their_head(tmp_path):
    p = write_unlabeled_csv(tmp_path / "u.csv")
    s = settings_for(source="local", path=str(p), text_column="review", label_column=None)
    s.model.kind, s.model.name = "zoo", "minilm_sentiment"
    with pytest.raises(ConfigError) as err:
        load_splits(s, cache_dir=tmp_path / "cache")
    assert "model.kind=zoo" in str(err.value) and "data.label_column" in str(err.value)


def test_hub_loader_with_a_named_test_split(tmp_path):
    """data.source=hub reads a dataset folder (as the hub would serve it) offline: its
    test split is the test split; texts in both are dropped from train, counted."""
    folder = tmp_path / "ds"
    folder.mkdir()
    write_unlabeled_csv(folder / "train.csv", n=120)
    with open(folder / "test.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["review", "author"])
        for i in range(30):
            w.writerow([f"held out {i}", f"t{i}"])
        w.writerow(["review 5 says good things", "a5"])  # also in train
    s = settings_for(source="hub", path=str(folder), text_column="review", label_column=None,
                     eval_split="test")
    splits = load_splits(s, cache_dir=tmp_path / "cache")
    assert len(splits.test) == 31 and splits.test.labels is None
    assert "review 5 says good things" not in splits.train.texts + splits.dev.texts + \
        splits.calib.texts
    assert splits.info.duplicates_dropped == 1 and splits.info.rows_read == 151
    assert sum(len(x) for x in (splits.train, splits.calib, splits.dev)) + splits.info.unused == 119


def test_label_free_text_feeds_run_and_the_record_is_json(tmp_path):
    import json

    from test_tokenizers import bert_like_model, write_vocab

    from quantkit.data import note_truncation
    from quantkit.data.feeds import TextFeeds
    from quantkit.data.text import TextEncoder, load_tokenizer

    p = write_unlabeled_csv(tmp_path / "u.csv", n=80)
    s = settings_for(source="local", path=str(p), text_column="review", label_column=None)
    s.data.calib.num_samples = 8
    splits = load_splits(s, cache_dir=tmp_path / "cache")
    vocab = write_vocab(tmp_path / "tok")
    feeds = TextFeeds(TextEncoder(load_tokenizer(str(vocab)), max_length=6,
                                  input_names=["input_ids", "attention_mask"]))
    model = tmp_path / "m.onnx"
    onnx.save(bert_like_model(15, with_types=False), str(model))
    with OrtRunner(str(model)) as r:
        logits = run_split(r, feeds, splits.test, output="logits", batch_size=4)
    assert logits.shape == (len(splits.test), 2) and np.isfinite(logits).all()
    counts = note_truncation(splits, feeds)  # "review N says good things": 5 words + 2 > 6
    assert counts == splits.sizes()
    doc = json.loads(json.dumps(splits.to_dict()))
    assert doc["label_free"] is True and doc["info"]["truncated"] == counts
    assert {w["code"] for w in doc["info"]["warnings"]} >= {"label_free", "texts_truncated"}
    assert doc["sizes"] == splits.sizes() and set(doc["sha256"]) == {"train", "calib", "dev", "test"}
