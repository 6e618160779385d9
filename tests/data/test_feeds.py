"""Feeds (text / image) and image splits: what every stage of a run is fed, on real ORT sessions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.batched import run_split
from quantkit.backends.ort import OrtRunner
from quantkit.data.feeds import ImageFeeds, TextFeeds
from quantkit.data.images import FASHION_MNIST_FILES, FASHION_MNIST_ROOT, ImagePreprocess, preprocess
from quantkit.data.splits import ImageSplit, TextSplit, make_splits
from quantkit.errors import ConfigError, DataError
from quantkit.settings import DataConfig

needs_fashion = pytest.mark.skipif(
    not (Path(FASHION_MNIST_ROOT) / FASHION_MNIST_FILES["test_labels"]).is_file(),
    reason="Fashion-MNIST not installed: apt-get install dataset-fashion-mnist")


def images(n=120, size=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, size, size), dtype=np.uint8), rng.integers(0, 3, n)


def image_cfg(calib=10, limit=None, test_fraction=0.25, dev_fraction=0.2) -> DataConfig:
    c = DataConfig(name="t", kind="image", source="local", test_fraction=test_fraction,
                   dev_fraction=dev_fraction)
    c.calib.num_samples = calib
    c.calib.min_samples = 4
    c.test.limit = limit
    return c


def image_splits(x, y, c, *, seed=0, n_train=None, test=None, calib_fits_data=False):
    return make_splits(ImageSplit("all", x, y), ["a", "b", "c"], c, seed=seed, train_size=n_train,
                       test_part=None if test is None else ImageSplit("test", *test),
                       calib_fits_data=calib_fits_data)


def tiny_cnn(size=8) -> onnx.ModelProto:
    """Conv -> GlobalAveragePool -> Flatten -> Gemm: 3-channel images to 3 logits."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc"),
             numpy_helper.from_array(np.zeros(3, np.float32), "fb")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="head", transB=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_image_splits_are_seeded_disjoint_and_hashed():
    x, y = images()
    a = image_splits(x, y, image_cfg(), n_train=40)
    b = image_splits(x, y, image_cfg(), n_train=40)
    assert a.hashes() == b.hashes()
    assert a.sizes() == {"train": 40, "calib": 10, "dev": 24, "test": 30}
    rows = {n: set(s.source_index.tolist()) for n, s in a.named().items()}
    for p in rows:
        for q in rows:
            assert p == q or not rows[p] & rows[q], (p, q)  # the head never saw calib / dev
    np.testing.assert_array_equal(a.test.images, x[a.test.source_index])
    np.testing.assert_array_equal(a.calib.labels, y[a.calib.source_index])
    assert a.info.unused == 120 - 40 - 10 - 24 - 30
    c = image_splits(x, y, image_cfg(), seed=1, n_train=40)
    assert c.hashes()["test"] != a.hashes()["test"]
    # without n_train the head gets every image left after test, dev and calibration
    d = image_splits(x, y, image_cfg(limit=7))
    assert len(d.train) == 120 - 30 - 24 - 10 and len(d.test) == 7
    # a pre-made test set is kept whole (up to the limit) and never sampled from; dev and
    # calibration come from the other images
    e = image_splits(x, y, image_cfg(limit=5), test=(x[:20], y[:20]), n_train=60)
    assert set(e.test.source_index.tolist()) <= set(range(20)) and len(e.test) == 5
    assert e.info.limits["test"]["before"] == 20
    assert len(e.train) == 60 and len(e.calib) == 10 and len(e.dev) == 24


def test_image_split_hash_and_errors():
    x, y = images(20)
    s = ImageSplit("s", x, y)
    flipped = x.copy()
    flipped[3, 0, 0] ^= 1
    assert ImageSplit("s", flipped, y).sha256 != s.sha256
    assert s.subset(range(5)).sha256 == ImageSplit("s", x[:5], y[:5]).sha256
    assert ImageSplit("s", x, None).sha256 != s.sha256  # label-free hashes pixels only
    with pytest.raises(DataError, match="labels than images"):
        ImageSplit("s", x, y[:3])
    with pytest.raises(DataError, match="calibration samples"):  # a head needs train
        image_splits(x, y, image_cfg(calib=500), n_train=40)
    # no head (a ready ONNX model): calibrates on what is left
    short = image_splits(x, y, image_cfg(calib=500), calib_fits_data=True)
    assert "calib_smaller_than_requested" in short.info.warning_codes()
    assert 0 < len(short.calib) < 20
    few = image_cfg(calib=500)
    few.calib.min_samples = few.calib.warn_below = 100
    with pytest.raises(ConfigError, match="data left after test and dev holds"):
        image_splits(x, y, few, calib_fits_data=True)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_image_feeds_batches_in_order(layout):
    x, _ = images(37)
    pp = ImagePreprocess(size=12)
    f = ImageFeeds(pp, input_name="pixels", layout=layout)
    seen, batches = [], list(f.batches(x, 16))
    assert [len(i) for i, _ in batches] == [16, 16, 5]
    for idx, feed in batches:
        want = preprocess(x[idx], pp)
        got = feed["pixels"] if layout == "NCHW" else feed["pixels"].transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(got, want)
        seen.extend(idx.tolist())
    assert seen == list(range(37))
    assert f.lengths(x) is None and f.slices(None) == {}
    assert f.cache_key()["preprocess"]["size"] == 12 and f.cache_key()["layout"] == layout
    assert ImageFeeds(ImagePreprocess(size=13)).cache_key() != ImageFeeds(pp).cache_key()
    with pytest.raises(DataError, match="cannot be fed texts"):
        next(f.batches(TextSplit("t", ["a"], [0]), 4))
    with pytest.raises(ConfigError, match="layout"):
        ImageFeeds(pp, layout="CHW")


def test_text_feeds_wrap_the_encoder_unchanged(tmp_path):
    """TextFeeds gives exactly iter_feeds' batches (text runs are unchanged by the abstraction)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from quantkit.data.text import TextEncoder, iter_feeds

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate("a b c d e f g".split())}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    enc = TextEncoder(tok, max_length=8, input_names=["input_ids", "attention_mask"])
    texts = ["a b c", "d", "e f g a b", "c c", "g"]
    split = TextSplit("t", texts, [0, 1, 0, 1, 0])
    f = TextFeeds(enc)
    np.testing.assert_array_equal(f.lengths(split), enc.lengths(texts))
    ours = list(f.batches(split, 2))
    ref = list(iter_feeds(enc, texts, 2))
    assert len(ours) == len(ref)
    for (i1, f1), (i2, f2) in zip(ours, ref):
        np.testing.assert_array_equal(i1, i2)
        assert f1.keys() == f2.keys() and all(np.array_equal(f1[k], f2[k]) for k in f1)
    assert list(f.slices(f.lengths(split))) == ["length"]
    # the key follows the tokenizer's content: the same vocabulary rebuilt is the same key,
    # one more word or another max_length is another
    same = Tokenizer(models.WordLevel(dict(vocab), unk_token="[UNK]"))
    same.pre_tokenizer = pre_tokenizers.Whitespace()
    assert TextFeeds(TextEncoder(same, max_length=8, input_names=["input_ids", "attention_mask"])
                     ).cache_key() == f.cache_key()
    more = Tokenizer(models.WordLevel({**vocab, "h": 8}, unk_token="[UNK]"))
    more.pre_tokenizer = pre_tokenizers.Whitespace()
    assert TextFeeds(TextEncoder(more, max_length=8, input_names=["input_ids", "attention_mask"])
                     ).cache_key() != f.cache_key()
    short = Tokenizer(models.WordLevel(dict(vocab), unk_token="[UNK]"))
    short.pre_tokenizer = pre_tokenizers.Whitespace()
    assert TextFeeds(TextEncoder(short, max_length=4, input_names=["input_ids",
                                                                   "attention_mask"])
                     ).cache_key() != f.cache_key()
    with pytest.raises(DataError, match="cannot be fed images"):
        next(f.batches(ImageSplit("i", *images(3)), 2))


def test_run_split_on_images_matches_one_by_one(tmp_path):
    x, _ = images(21)
    pp = ImagePreprocess(size=8)
    path = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), str(path))
    with OrtRunner(path) as r:
        logits = run_split(r, ImageFeeds(pp), ImageSplit("e", x, np.zeros(21)), output="logits",
                           batch_size=8, progress=False)
        one = np.concatenate([r.infer({"input": preprocess(x[i:i + 1], pp)})["logits"]
                              for i in range(21)])
    assert logits.shape == (21, 3)
    np.testing.assert_allclose(logits, one, rtol=1e-5, atol=1e-5)


@needs_fashion
def test_fashion_mnist_experiment_splits():
    """mobilenet_int8's data: the 10,000 test images are the test split; head, calibration
    and dev images come from the train images, disjoint."""
    import quantkit
    from quantkit.data import load_splits

    s = quantkit.configure(["experiment=mobilenet_int8"])
    assert s.data.kind == "image" and s.model.name == "mobilenet_fashion"
    assert s.verdict.margin == 0.01 and s.verdict.margin_kind == "relative"
    splits = load_splits(s, cache_dir=Path("/nonexistent"))
    assert splits.sizes() == {"train": s.model.head.n_train, "calib": s.data.calib.num_samples,
                              "dev": 5000, "test": 10000}
    rows = {n: set(splits.named()[n].source_index.tolist()) for n in ("train", "calib", "dev")}
    assert not rows["train"] & rows["calib"] and not rows["train"] & rows["dev"]
    assert not rows["calib"] & rows["dev"]
    assert splits.label_names[0] == "T-shirt/top" and len(splits.label_names) == 10
    assert np.bincount(splits.test.labels).tolist() == [1000] * 10  # the real test set
    assert splits.eval is splits.test
    assert np.bincount(splits.dev.labels, minlength=10).min() > 400  # every class in dev
    assert len(set(splits.test.groups)) == 10000  # each image its own group


@pytest.mark.parametrize("overrides,key", [
    (["data.image.mean=[0.5]"], "data.image.mean"),
    (["data.image.std=[0.2,0.0,0.2]"], "data.image.std"),
    (["data.image.layout=CHW"], "data.image.layout"),
    (["data.image.channels=2"], "data.image.channels"),
    (["model.head.n_train=0"], "model.head.n_train"),
    (["model=hub", "model.hub_id=x/y"], "model.kind"),
])
def test_image_settings_errors_name_the_key(overrides, key):
    import quantkit
    from quantkit.settings import build

    cfg = quantkit.compose(["experiment=mobilenet_int8", *overrides])
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert key in str(err.value) and "Fix:" in str(err.value)


def test_text_experiment_refuses_an_image_head_setting():
    import quantkit
    from quantkit.settings import build

    cfg = quantkit.compose(["experiment=bert_int8", "model.head.n_train=100"])
    with pytest.raises(ConfigError, match="model.head.n_train"):
        build(cfg)


def test_zoo_model_refuses_the_other_data_kind():
    import quantkit
    from quantkit.models import load_model
    from quantkit.settings import build

    cfg = quantkit.compose(["experiment=bert_int8", "data=fashion_mnist"])
    with pytest.raises(ConfigError, match="takes text data"):
        load_model(build(cfg), splits=None, cache_dir=Path("/nonexistent"))


def test_hub_image_dataset_rows_become_images():
    """An image dataset as ``datasets`` gives it (Image + ClassLabel features), built locally."""
    datasets = pytest.importorskip("datasets")
    Image = pytest.importorskip("PIL.Image")
    from quantkit.data.images import hub_images

    rng = np.random.default_rng(0)
    pics = [Image.fromarray(rng.integers(0, 256, (10, 14), dtype=np.uint8)) for _ in range(6)]
    ds = datasets.Dataset.from_dict(
        {"img": pics, "y": [0, 1, 2, 0, 1, 2]},
        features=datasets.Features({"img": datasets.Image(),
                                    "y": datasets.ClassLabel(names=["a", "b", "c"])}))
    c = DataConfig(name="h", kind="image", source="hub", path="x", image_column="img",
                   label_column="y")
    c.image.size = 8
    x, y, names = hub_images(ds, c)
    assert x.shape == (6, 8, 8, 3) and x.dtype == np.uint8 and names == ["a", "b", "c"]
    assert y.tolist() == [0, 1, 2, 0, 1, 2]
    np.testing.assert_array_equal(x[..., 0], x[..., 2])  # grayscale converted to RGB
    with pytest.raises(DataError, match="column not found"):
        hub_images(ds, DataConfig(name="h", kind="image", source="hub", path="x",
                                  image_column="image", label_column="y"))
