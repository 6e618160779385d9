"""Image preprocessing gives the same bytes on every BLAS kernel, and torch's bilinear numbers.

Issue 48 point 7: the resize was a float32 matrix product and the luma a tensordot, so
OpenBLAS's Haswell and SkylakeX kernels gave other pixels (and other INT8 artifacts). Both are
elementwise now. The pixels are sklearn's two sample photos (bundled with scikit-learn, read
with Pillow, which matplotlib requires): always here, unlike Fashion-MNIST.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from blas_kernels import same_under_two_kernels
from quantkit.data.feeds import ImageFeeds
from quantkit.data.images import PREPROCESS_VERSION, ImagePreprocess, preprocess

# Runs in a child process (tests/blas_kernels.py): sha256 of each preprocessed batch.
_CHILD = r"""
import hashlib, json
import numpy as np
from sklearn.datasets import load_sample_images
from quantkit.data.images import ImagePreprocess, preprocess

photos = np.stack(load_sample_images().images)  # uint8 [2, 427, 640, 3]
small = np.ascontiguousarray(photos[:, ::15, ::22, 1][:, :28, :28])  # gray 28x28, as Fashion-MNIST
batches = {
    "rgb_down_224": preprocess(photos, ImagePreprocess(size=224)),
    "luma_down_112": preprocess(photos, ImagePreprocess(size=112, channels=1, mean=(0.5,),
                                                        std=(0.5,))),
    "gray_up_112": preprocess(small, ImagePreprocess(size=112)),
}
_out = {"sha256": {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in batches.items()}}
"""


def test_preprocess_bytes_do_not_depend_on_the_blas_kernel():
    pytest.importorskip("PIL")
    pytest.importorskip("sklearn")
    forced, default = same_under_two_kernels(_CHILD)
    assert forced["sha256"] == default["sha256"], (forced, default)


def test_image_feeds_key_names_the_preprocess_version():
    """Other pixels from the same settings must not read stages cached from the old ones."""
    assert ImageFeeds(ImagePreprocess()).cache_key()["preprocess_version"] == PREPROCESS_VERSION


def _torch_resize(x: np.ndarray, size: int) -> np.ndarray:
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(np.ascontiguousarray(x))
    return torch.nn.functional.interpolate(t, size=(size, size), mode="bilinear",
                                           align_corners=False, antialias=False).numpy()


@pytest.mark.parametrize("shape, size", [
    ((3, 28, 28), 112),  # up, x4 (Fashion-MNIST -> the CNN)
    ((2, 28, 28), 45),  # up, not a whole factor
    ((2, 91, 91), 20),  # down
    ((2, 200, 300), 48),  # down, non-square input
    ((2, 30, 17), 24),  # down one axis, up the other
])
def test_resize_matches_torch_bilinear(shape, size):
    """preprocess with mean 0, std 1 is the resize alone, on the [0, 1] scale."""
    imgs = np.random.default_rng(sum(shape) + size).integers(0, 256, shape, dtype=np.uint8)
    flat = ImagePreprocess(size=size, channels=1, mean=(0.0,), std=(1.0,))
    got = preprocess(imgs, flat)
    x = imgs[:, None].astype(np.float32) / np.float32(255.0)
    want = _torch_resize(x, size)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got, _exact_resize(x, size), atol=1e-6, rtol=0)


def _exact_resize(x: np.ndarray, size: int) -> np.ndarray:
    """float64 bilinear resize of [..., H, W] with source coordinates in exact fractions."""
    def taps(n_in: int):
        src = [max(Fraction(2 * d + 1, 2) * Fraction(n_in, size) - Fraction(1, 2), 0)
               for d in range(size)]
        i0 = np.array([min(int(s), n_in - 1) for s in src])
        i1 = np.minimum(i0 + 1, n_in - 1)
        frac = np.array([float(s - int(s)) if b != a else 0.0 for s, a, b in zip(src, i0, i1)])
        return i0, i1, 1.0 - frac, frac

    (a0, a1, w0, w1), (b0, b1, v0, v1) = taps(x.shape[-2]), taps(x.shape[-1])
    x = x.astype(np.float64)
    rows = x[..., a0, :] * w0[:, None] + x[..., a1, :] * w1[:, None]
    return rows[..., b0] * v0 + rows[..., b1] * v1


def test_resize_of_photos_matches_exact_coordinates_and_torch():
    """On 427x640 photos torch's float32 source coordinates drift (4.4e-5 px at 640 -> 224, so
    up to 3e-5 in a pixel); ours are computed in float64, as the exact ones to 1e-6."""
    pytest.importorskip("PIL")
    from sklearn.datasets import load_sample_images

    photos = np.stack(load_sample_images().images)  # [2, 427, 640, 3]
    x = photos.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    for size in (224, 300):
        got = preprocess(photos, ImagePreprocess(size=size, mean=(0.0,) * 3, std=(1.0,) * 3))
        np.testing.assert_allclose(got, _exact_resize(x, size), atol=1e-6, rtol=0)
        np.testing.assert_allclose(got, _torch_resize(x, size), atol=1e-4, rtol=0)


def test_luma_is_the_601_weights_in_float32():
    pytest.importorskip("PIL")
    from sklearn.datasets import load_sample_images

    photos = np.stack(load_sample_images().images)[:, :64, :80]
    luma = preprocess(photos, ImagePreprocess(size=64, channels=1, mean=(0.0,), std=(1.0,)))
    # float64 luma of the 64x80 crop, then torch's resize of its width to 64
    x = photos.astype(np.float64) / 255.0
    want = _torch_resize((x @ np.array([0.299, 0.587, 0.114]))[:, None].astype(np.float32), 64)
    np.testing.assert_allclose(luma, want, atol=2e-6, rtol=0)
