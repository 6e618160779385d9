"""Image files of any bit depth and mode, written with Pillow (and by hand for 16-bit RGB),
read back as the pixels they hold; the modes without a known range are refused with a fix."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from quantkit.data.image_io import load_image_folder, read_image
from quantkit.data.images import ImagePreprocess, preprocess
from quantkit.errors import DataError

Image = pytest.importorskip("PIL.Image")


def gradient16() -> np.ndarray:
    return (np.arange(16 * 16, dtype=np.uint32).reshape(16, 16) * 257).astype(np.uint16)


def png16(path, arr: np.ndarray, color_type: int) -> None:
    """A 16-bit PNG written by hand (Pillow cannot write 16-bit RGB)."""
    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[r].astype(">u2").tobytes() for r in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_16_bit_grayscale_is_scaled_not_saturated(tmp_path):
    a = gradient16()
    Image.fromarray(a).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    gray = read_image(tmp_path / "g16.png", mode="L")[..., 0]
    np.testing.assert_array_equal(gray, np.arange(256, dtype=np.uint8).reshape(16, 16))
    assert (gray == 255).mean() < 0.01  # the bug was 99% saturated pixels
    rgb = read_image(tmp_path / "g16.png", mode="RGB")
    assert rgb.shape == (16, 16, 3) and np.array_equal(rgb[..., 0], gray)
    # and resized after the conversion, not before
    small = read_image(tmp_path / "g16.png", mode="L", size=8)
    assert small.shape == (8, 8, 1) and 100 < small.mean() < 155


def test_16_bit_rgb_keeps_the_high_byte(tmp_path):
    a = np.zeros((4, 4, 3), np.uint16)
    a[..., 0], a[..., 1], a[..., 2] = 65535, 32768, 256
    png16(tmp_path / "rgb16.png", a, color_type=2)
    np.testing.assert_array_equal(read_image(tmp_path / "rgb16.png")[0, 0], [255, 128, 1])


def test_palette_rgba_la_cmyk_and_bilevel(tmp_path):
    rgb = np.zeros((8, 8, 3), np.uint8)
    rgb[:4] = (200, 10, 10)
    rgb[4:] = (10, 10, 200)
    Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=4).save(tmp_path / "p.png")
    assert Image.open(tmp_path / "p.png").mode == "P"
    np.testing.assert_array_equal(read_image(tmp_path / "p.png"), rgb)

    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., :3] = (10, 20, 30)
    rgba[:2, :, 3] = 255  # top half opaque, bottom half transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    white = read_image(tmp_path / "a.png")
    assert white[0, 0].tolist() == [10, 20, 30] and white[3, 0].tolist() == [255, 255, 255]
    assert read_image(tmp_path / "a.png", alpha="black")[3, 0].tolist() == [0, 0, 0]
    assert read_image(tmp_path / "a.png", alpha="drop")[3, 0].tolist() == [10, 20, 30]

    Image.new("LA", (4, 4), (100, 255)).save(tmp_path / "la.png")
    assert read_image(tmp_path / "la.png", mode="L")[0, 0, 0] == 100

    Image.new("CMYK", (16, 16), (0, 255, 255, 0)).save(tmp_path / "c.jpg", quality=95)
    assert Image.open(tmp_path / "c.jpg").mode == "CMYK"
    red = read_image(tmp_path / "c.jpg")[8, 8].astype(int)
    assert red[0] > 230 and red[1] < 25 and red[2] < 25

    Image.new("1", (4, 4), 1).save(tmp_path / "b.png")
    assert read_image(tmp_path / "b.png", mode="L").max() == 255


@pytest.mark.parametrize("mode,array", [
    ("I", np.full((4, 4), 70000, np.int32)),
    ("F", np.full((4, 4), 0.5, np.float32)),
])
def test_modes_without_a_range_are_refused_with_the_fix(tmp_path, mode, array):
    Image.fromarray(array, mode).save(tmp_path / "x.tif")
    with pytest.raises(DataError) as err:
        read_image(tmp_path / "x.tif")
    msg = str(err.value)
    assert f"mode {mode}" in msg and "x.tif" in msg and "16-bit PNG" in msg and "\n" not in msg


def test_exif_orientation_is_applied(tmp_path):
    im = Image.new("RGB", (20, 10), (0, 0, 0))
    im.paste((255, 255, 255), (0, 0, 5, 10))  # left edge white
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    im.save(tmp_path / "phone.jpg", exif=exif, quality=95)
    arr = read_image(tmp_path / "phone.jpg")
    assert arr.shape == (20, 10, 3)  # upright: 10 wide, 20 tall
    assert arr[:4].mean() > 200 and arr[-4:].mean() < 50  # the white edge is now on top


def test_a_folder_of_mixed_modes_reads_as_one_batch(tmp_path):
    Image.fromarray(gradient16()).save(tmp_path / "a16.png")
    Image.new("RGBA", (16, 16), (0, 0, 0, 0)).save(tmp_path / "b_rgba.png")
    Image.new("RGB", (16, 16), (10, 200, 10)).convert("P").save(tmp_path / "c_p.png")
    Image.new("CMYK", (16, 16), (0, 0, 0, 0)).save(tmp_path / "d_cmyk.jpg")
    x, y, names = load_image_folder(tmp_path, size=16)
    assert x.shape == (4, 16, 16, 3) and y is None and names == []
    assert x[1].min() == 255  # transparent -> white
    assert x[0].max() == 255 and x[0].min() == 0


def test_sample_photo_channel_order(tmp_path):
    datasets = pytest.importorskip("sklearn.datasets")
    china = datasets.load_sample_image("china.jpg")
    Image.fromarray(china).save(tmp_path / "china.png")
    back = read_image(tmp_path / "china.png")
    np.testing.assert_array_equal(back, china)
    flat = dict(size=64, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    rgb = preprocess(back[None], ImagePreprocess(**flat))
    bgr = preprocess(back[None], ImagePreprocess(**flat, channel_order="BGR"))
    np.testing.assert_array_equal(bgr[:, 0], rgb[:, 2])
    np.testing.assert_array_equal(bgr[:, 2], rgb[:, 0])
    assert not np.array_equal(rgb[:, 0], rgb[:, 2])  # the photo's channels differ
    # mean / std are in the model's channel order
    norm = preprocess(back[None], ImagePreprocess(size=64, mean=(0.1, 0.2, 0.3),
                                                  std=(1.0, 1.0, 1.0), channel_order="BGR"))
    np.testing.assert_allclose(norm[:, 0], rgb[:, 2] - 0.1, atol=1e-6)
    assert "channel_order" not in ImagePreprocess().to_dict()  # RGB: cache keys as before
    assert ImagePreprocess(channel_order="BGR").to_dict()["channel_order"] == "BGR"
