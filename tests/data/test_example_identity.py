"""What one test example is for the test ledger (quantkit/data/identity.py): its source
content before any preprocessing. Texts that differ only in whitespace or Unicode form are
one example; an image folder read at another ``data.image.size`` or channel count gives the
same examples (the files' bytes); Fashion-MNIST's arrays are their pixels at source size."""

from __future__ import annotations

import numpy as np
import pytest

import quantkit
from quantkit.data import load_splits
from quantkit.data.identity import image_array_id, normalize_text, text_id
from quantkit.data.splits import ImageSplit, TextSplit


def test_text_is_normalized_for_whitespace_and_unicode_form():
    assert normalize_text("  a\tgood\u00a0film \n") == "a good film"
    assert normalize_text("cafe\u0301") == normalize_text("caf\u00e9") == "caf\u00e9"
    assert text_id("a good film ") == text_id("a  good film") == text_id("a good film")
    assert text_id("a good film") != text_id("a good films")
    assert text_id("A good film") != text_id("a good film")  # case is content


def test_a_text_split_ids_ignore_labels_order_and_tokenizer_settings():
    a = TextSplit("test", ["a b", "c d "], [0, 1])
    b = TextSplit("test", [" c d", "a  b"], [1, 1])
    assert set(a.example_ids()) == set(b.example_ids())


def test_array_ids_are_the_pixels_at_source_size():
    img = np.arange(16, dtype=np.uint8).reshape(4, 4)
    split = ImageSplit("test", img[None], [0])
    assert split.example_ids() == [image_array_id(img)]
    assert image_array_id(img) != image_array_id(img.T.copy())


def _folder(root, n: int = 60):
    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    for i in range(n):
        d = root / ("cat" if i % 2 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return root


def _test_split(path, *overrides):
    s = quantkit.configure(["experiment=mobilenet_int8", "model=onnx", "model.path=/m.onnx",
                            "data=image_folder", f"data.path={path}", "data.calib.num_samples=8",
                            "data.calib.min_samples=8", *overrides])
    return load_splits(s, cache_dir=path.parent / "cache").test


def test_an_image_folder_gives_the_same_examples_at_any_image_size(tmp_path):
    """The issue's case: images loaded at another data.image.size were new examples."""
    path = _folder(tmp_path / "images")
    small = _test_split(path, "data.image.size=16")
    big = _test_split(path, "data.image.size=48", "data.image.channels=1",
                      "data.image.mean=[0.5]", "data.image.std=[0.25]")
    assert small.images.shape[1:3] == (16, 16) and big.images.shape[1:3] == (48, 48)
    assert small.example_ids() == big.example_ids() and len(set(small.example_ids())) == \
        len(small)
    files = sorted(path.rglob("*.png"))
    from quantkit.data.identity import image_file_id

    assert set(small.example_ids()) <= {image_file_id(f.read_bytes()) for f in files}
