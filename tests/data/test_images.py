"""Fashion-MNIST IDX files, image folders and numpy preprocessing, on the real Debian dataset."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from quantkit.data.images import (FASHION_MNIST_CLASSES, FASHION_MNIST_FILES, FASHION_MNIST_ROOT,
                                  IMAGENET_MEAN, IMAGENET_STD, ImagePreprocess, bilinear_matrix,
                                  images_sha256, iter_image_feeds, load_fashion_mnist,
                                  load_image_folder, preprocess, read_idx)
from quantkit.errors import ConfigError, DataError

ROOT = Path(FASHION_MNIST_ROOT)
needs_fashion = pytest.mark.skipif(
    not (ROOT / FASHION_MNIST_FILES["test_labels"]).is_file(),
    reason="Fashion-MNIST not installed: apt-get install dataset-fashion-mnist")


@pytest.fixture(scope="module")
def fashion():
    if not (ROOT / FASHION_MNIST_FILES["test_labels"]).is_file():
        pytest.skip("Fashion-MNIST not installed: apt-get install dataset-fashion-mnist")
    return load_fashion_mnist()


def torch_reference(images: np.ndarray, size: int) -> np.ndarray:
    """torch's bilinear resize (align_corners=False) + ImageNet normalization, 3 channels."""
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(images).float() / 255.0
    x = x[:, None] if x.ndim == 3 else x.permute(0, 3, 1, 2)
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    x = x.expand(-1, 3, -1, -1)
    mean = torch.tensor(IMAGENET_MEAN)[None, :, None, None]
    std = torch.tensor(IMAGENET_STD)[None, :, None, None]
    return ((x - mean) / std).numpy()


# --------------------------------------------------------------------------- IDX files


def test_fashion_mnist_shapes_and_labels(fashion):
    tr_x, tr_y, te_x, te_y = fashion
    assert tr_x.shape == (60000, 28, 28) and te_x.shape == (10000, 28, 28)
    assert tr_x.dtype == te_x.dtype == np.uint8
    assert tr_y.shape == (60000,) and te_y.shape == (10000,)
    for y in (tr_y, te_y):
        assert y.min() == 0 and y.max() == 9
        assert (np.bincount(y) == len(y) // 10).all()  # balanced: 6000 / 1000 per class
    assert len(FASHION_MNIST_CLASSES) == 10
    assert 0 < tr_x.mean() < 255 and tr_x.max() == 255


@needs_fashion
def test_read_idx_plain_and_gzip_agree(tmp_path):
    src = ROOT / FASHION_MNIST_FILES["test_labels"]
    plain = tmp_path / "labels-idx1-ubyte"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a, b = read_idx(src), read_idx(plain)
    assert a.shape == (10000,) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)


@needs_fashion
@pytest.mark.parametrize("damage, message", [
    ("truncate_gzip", "could not read the IDX file"),
    ("bad_magic", "bad magic number"),
    ("short_data", "does not match its header"),
    ("empty", "too short"),
])
def test_corrupt_idx_is_one_clear_error(tmp_path, damage, message):
    src = ROOT / FASHION_MNIST_FILES["test_labels"]
    raw = gzip.decompress(src.read_bytes())
    bad = tmp_path / "bad.gz"
    if damage == "truncate_gzip":
        data = src.read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "bad_magic":
        bad.write_bytes(gzip.compress(b"\x08\x03" + raw[2:]))
    elif damage == "short_data":
        bad.write_bytes(gzip.compress(raw[:-10]))
    else:
        bad.write_bytes(gzip.compress(b""))
    with pytest.raises(DataError, match=message) as err:
        read_idx(bad)
    assert str(bad) in str(err.value) and "Fix:" in str(err.value)


def test_missing_dataset_says_how_to_install(tmp_path):
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist(tmp_path)
    with pytest.raises(DataError, match="not found"):
        read_idx(tmp_path / "nope.gz")


# --------------------------------------------------------------------------- preprocessing


def test_preprocess_shape_and_normalization():
    imgs = np.zeros((2, 28, 28), np.uint8)
    imgs[1] = 255
    x = preprocess(imgs)
    assert x.shape == (2, 3, 112, 112) and x.dtype == np.float32 and x.flags.c_contiguous
    mean, std = np.array(IMAGENET_MEAN), np.array(IMAGENET_STD)
    np.testing.assert_allclose(x[0, :, 5, 7], -mean / std, rtol=1e-6)
    np.testing.assert_allclose(x[1, :, 100, 3], (1 - mean) / std, rtol=1e-6)
    one = preprocess(imgs, ImagePreprocess(size=28, channels=1, mean=(0.5,), std=(0.5,)))
    assert one.shape == (2, 1, 28, 28)
    np.testing.assert_array_equal(one[:, 0, 0, 0], [-1.0, 1.0])


def test_bilinear_rows_are_convex_weights():
    for n_in, n_out in [(28, 112), (91, 20), (5, 5)]:
        m = bilinear_matrix(n_in, n_out)
        assert m.shape == (n_out, n_in) and (m >= 0).all()
        np.testing.assert_allclose(m.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(bilinear_matrix(5, 5), np.eye(5, dtype=np.float32))


def test_preprocess_matches_torch_interpolate_on_fashion(fashion):
    imgs = fashion[2][:16]
    x = preprocess(imgs)
    ref = torch_reference(imgs, 112)
    np.testing.assert_allclose(x, ref, atol=1e-4, rtol=0)
    gray = x * np.array(IMAGENET_STD)[:, None, None] + np.array(IMAGENET_MEAN)[:, None, None]
    np.testing.assert_allclose(gray[:, 1:], gray[:, :1].repeat(2, axis=1), atol=1e-6)  # replicated


def test_preprocess_matches_torch_on_rgb_photos_up_and_down():
    pytest.importorskip("PIL")
    from sklearn.datasets import load_sample_images

    photos = np.stack([im[:200, :300] for im in load_sample_images().images])  # real, non-square
    for size in (48, 160):
        x = preprocess(photos, ImagePreprocess(size=size))
        np.testing.assert_allclose(x, torch_reference(photos, size), atol=1e-4, rtol=0)


def test_preprocess_rejects_bad_input_and_config():
    with pytest.raises(DataError, match=r"\[N, H, W\]"):
        preprocess(np.zeros((28, 28), np.uint8))
    with pytest.raises(DataError, match="resize is none"):
        preprocess(np.zeros((1, 28, 28), np.uint8), ImagePreprocess(resize="none"))
    with pytest.raises(ConfigError, match="one value per channel"):
        ImagePreprocess(channels=1)
    with pytest.raises(ConfigError, match="resize"):
        ImagePreprocess(resize="bicubic")
    assert ImagePreprocess().to_dict() == {"size": 112, "channels": 3, "mean": list(IMAGENET_MEAN),
                                           "std": list(IMAGENET_STD), "resize": "bilinear"}


def test_iter_image_feeds_covers_all_in_order(fashion):
    imgs = fashion[2][:70]
    pp = ImagePreprocess(size=32)
    seen = []
    for idx, feed in iter_image_feeds(imgs, 32, pp, input_name="pixels"):
        assert list(feed) == ["pixels"] and feed["pixels"].shape == (len(idx), 3, 32, 32)
        np.testing.assert_array_equal(feed["pixels"], preprocess(imgs[idx], pp))
        seen.extend(idx.tolist())
    assert seen == list(range(70))
    with pytest.raises(ConfigError):
        next(iter_image_feeds(imgs, 0, pp))


def test_images_hash_sees_pixels_and_labels(fashion):
    x, y = fashion[2][:100], fashion[3][:100]
    h = images_sha256(x, y)
    assert h == images_sha256(x.copy(), y.copy())
    assert h != images_sha256(x, np.roll(y, 1)) and h != images_sha256(x)
    x2 = x.copy()
    x2[0, 0, 0] ^= 1
    assert h != images_sha256(x2, y)


# --------------------------------------------------------------------------- image folders


def test_image_folder_round_trip(fashion, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    imgs, labels = fashion[2][:12], fashion[3][:12]
    for i, (im, y) in enumerate(zip(imgs, labels)):
        d = tmp_path / f"{int(y):02d}_{FASHION_MNIST_CLASSES[y].replace('/', '-')}"
        d.mkdir(exist_ok=True)
        Image.fromarray(im).save(d / f"{i:03d}.png")
    (tmp_path / "notes.txt").write_text("not a class")
    x, y, names = load_image_folder(tmp_path, mode="L")
    assert x.shape == (12, 28, 28, 1) and names == sorted(names) and len(names) == len(set(labels))
    # the images come back per class; each must match one of the originals with that class
    for img, lab in zip(x[..., 0], y):
        cls = int(names[lab][:2])
        assert any(np.array_equal(img, o) for o, t in zip(imgs, labels) if t == cls)
    rgb, _, _ = load_image_folder(tmp_path, size=40)
    assert rgb.shape == (12, 40, 40, 3) and preprocess(rgb).shape == (12, 3, 112, 112)


def test_image_folder_errors(tmp_path):
    pytest.importorskip("PIL")
    from PIL import Image

    with pytest.raises(DataError, match="not found"):
        load_image_folder(tmp_path / "missing")
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError, match="no images"):
        load_image_folder(tmp_path)
    Image.new("L", (10, 10)).save(tmp_path / "a" / "x.png")
    Image.new("L", (12, 10)).save(tmp_path / "a" / "y.png")
    with pytest.raises(DataError, match="differ in size"):
        load_image_folder(tmp_path)
    (tmp_path / "a" / "z.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="could not read an image") as err:
        load_image_folder(tmp_path)
    assert "z.png" in str(err.value)
