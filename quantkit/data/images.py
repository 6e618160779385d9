"""Image data: Fashion-MNIST from IDX files, users' image folders, and torch-free preprocessing.

Fashion-MNIST comes from the Debian package ``dataset-fashion-mnist`` (gzip IDX files under
``/usr/share/datasets/fashion-mnist``). :func:`preprocess` turns uint8 images into the
float32 NCHW batches an ImageNet CNN wants: scale to [0, 1], bilinear resize (the same
numbers as ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)``),
grayscale replicated to 3 channels, per-channel normalization. numpy only; no torch. Every
step is elementwise (no matrix product), so the pixels are the same bytes whichever BLAS
kernel numpy dispatches to (tests/data/test_image_kernels.py runs OpenBLAS's Haswell kernel
against the host's default).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from quantkit.data.identity import image_file_id, image_pil_id
from quantkit.errors import ConfigError, DataError

log = logging.getLogger(__name__)

__all__ = ["FASHION_MNIST_CLASSES", "FASHION_MNIST_ROOT", "PREPROCESS_VERSION", "ImagePreprocess",
           "read_idx", "load_fashion_mnist", "load_image_folder", "preprocess", "bilinear_taps",
           "bilinear_matrix", "iter_image_feeds", "images_sha256", "hub_images"]

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot"]
#: Bump when :func:`preprocess` gives other pixels for the same images and settings: it is in
#: the image feeds' stage-cache key and the prepared MobileNet's key, so no old entry is read.
#: 1 (unnamed): matrix-product resize and tensordot luma, whose bits followed numpy's BLAS
#: kernel; 2: elementwise two-tap resize and luma, the same bytes on every kernel (issue 48).
PREPROCESS_VERSION = 2
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

# IDX type codes (third magic byte) -> big-endian numpy dtype.
_IDX_DTYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
_GZIP_MAGIC = b"\x1f\x8b"


# --------------------------------------------------------------------------- IDX files


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in an IDX file (gzip-compressed or plain), in native byte order.

    IDX: two zero bytes, a type code, the number of dimensions, then one big-endian uint32
    per dimension and the data. Any deviation is one :class:`DataError` naming the file.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError("IDX file not found", where=str(p), value=str(p),
                        fix="check the path (Fashion-MNIST: apt-get install dataset-fashion-mnist)")
    try:
        raw = p.read_bytes()
        if raw[:2] == _GZIP_MAGIC:
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError("could not read the IDX file", where=str(p),
                        value=f"{type(exc).__name__}: {exc}",
                        fix="the file is corrupt or truncated; reinstall or re-download it") from exc
    if len(raw) < 4:
        raise DataError("IDX file too short for its header", where=str(p), value=len(raw),
                        fix="the file is corrupt or truncated; reinstall or re-download it")
    zero, code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00" or code not in _IDX_DTYPES or ndim == 0:
        raise DataError("not an IDX file: bad magic number", where=str(p), value=raw[:4].hex(),
                        fix="expected 0000<type><ndim> with type one of "
                            f"{sorted(hex(c) for c in _IDX_DTYPES)}; the file is corrupt or "
                            "not IDX")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError("IDX file too short for its header", where=str(p), value=len(raw),
                        fix="the file is corrupt or truncated; reinstall or re-download it")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataError("IDX data size does not match its header", where=str(p),
                        value=f"{len(raw) - header} bytes for shape {shape} ({dtype.name})",
                        fix=f"expected {expected} bytes; the file is corrupt or truncated")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def load_fashion_mnist(root: str | os.PathLike = FASHION_MNIST_ROOT
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images uint8 [60000,28,28], train_labels int64, test_images [10000,28,28], test_labels).

    Labels are class ids 0..9; names in :data:`FASHION_MNIST_CLASSES`.
    """
    folder = Path(root).expanduser()
    missing = [n for n in FASHION_MNIST_FILES.values() if not (folder / n).is_file()]
    if missing:
        raise DataError("Fashion-MNIST files not found", where=str(folder), value=missing[0],
                        fix="apt-get install dataset-fashion-mnist (Debian/Ubuntu), or point "
                            "root at a folder with the four *-idx*-ubyte.gz files")
    arrays = {k: read_idx(folder / n) for k, n in FASHION_MNIST_FILES.items()}
    for split in ("train", "test"):
        x, y = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        where = str(folder / FASHION_MNIST_FILES[f"{split}_images"])
        if x.ndim != 3 or x.dtype != np.uint8:
            raise DataError("Fashion-MNIST images are not uint8 [N, H, W]", where=where,
                            value=f"{x.dtype} {x.shape}", fix="reinstall dataset-fashion-mnist")
        if y.ndim != 1 or len(y) != len(x):
            raise DataError("Fashion-MNIST labels do not match the images", where=where,
                            value=f"{len(y)} labels for {len(x)} images",
                            fix="reinstall dataset-fashion-mnist")
        if len(y) and (y.min() < 0 or y.max() >= len(FASHION_MNIST_CLASSES)):
            raise DataError("Fashion-MNIST labels outside 0..9", where=where,
                            value=(int(y.min()), int(y.max())), fix="reinstall dataset-fashion-mnist")
    log.info("Fashion-MNIST: %d train, %d test images from %s", len(arrays["train_images"]),
             len(arrays["test_images"]), folder)
    return (arrays["train_images"], arrays["train_labels"].astype(np.int64),
            arrays["test_images"], arrays["test_labels"].astype(np.int64))


# --------------------------------------------------------------------------- image folders

from quantkit.data.image_io import load_image_folder  # noqa: E402  (re-exported)


def hub_images(ds, cfg, source_ids: list[bytes] | None = None
               ) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """(uint8 images [N,S,S,C], labels or None, class names) from a Hugging Face image dataset.

    ``cfg`` is the data config: ``image_column`` holds PIL images (or {"bytes": ...}),
    ``label_column`` integer class ids (names from a ClassLabel feature or
    ``label_names``) or null for label-free data. Every image is read with
    :func:`~quantkit.data.image_io.to_uint8` (any bit depth and mode) and resized to
    ``image.size`` x ``image.size`` (bilinear) with Pillow. ``source_ids``: a list that gets
    each image's identity for the test ledger before any conversion (its encoded bytes
    where the row has them, else its pixels as decoded: quantkit.data.identity).
    """
    import io

    from PIL import Image

    from quantkit.data.image_io import to_uint8

    label_free = cfg.label_column is None
    keys = [("data.image_column", cfg.image_column)]
    if not label_free:
        keys.append(("data.label_column", cfg.label_column))
    for key, col in keys:
        if col not in ds.column_names:
            extra = ", or data.label_column=null for label-free data" if key == "data.label_column" else ""
            raise DataError("column not found in the dataset", where=key, value=col,
                            fix=f"set {key} to one of {ds.column_names}{extra}")
    feature = None if label_free else (ds.features.get(cfg.label_column)
                                       if hasattr(ds, "features") else None)
    names = list(cfg.label_names) or list(getattr(feature, "names", None) or [])
    mode = "L" if cfg.image.channels == 1 else "RGB"
    size = cfg.image.size
    images, labels, bad = [], [], []
    for i, row in enumerate(ds):
        im = row[cfg.image_column]
        if isinstance(im, dict) and im.get("bytes") is not None:
            if source_ids is not None:
                source_ids.append(image_file_id(im["bytes"]))
            im = Image.open(io.BytesIO(im["bytes"]))
        elif source_ids is not None and hasattr(im, "convert"):
            source_ids.append(image_pil_id(im))
        if not hasattr(im, "convert"):
            raise DataError("image column does not hold images", where=f"row {i} column "
                            f"{cfg.image_column}", value=type(im).__name__,
                            fix="set data.image_column to the dataset's image column")
        arr = to_uint8(im, mode=mode, alpha=cfg.image.alpha, where=f"row {i} column "
                       f"{cfg.image_column}")
        pil = Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
        arr = np.asarray(pil.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)
        images.append(arr if arr.ndim == 3 else arr[..., None])
        if label_free:
            continue
        y = row[cfg.label_column]
        if y is None or (isinstance(y, (float, np.floating)) and not np.isfinite(y)):
            bad.append((i, y))
            continue
        try:
            yi = int(y)
        except (TypeError, ValueError):
            if str(y) not in names:
                raise DataError("label is not a class id or a known class name",
                                where=f"row {i} column {cfg.label_column}", value=y,
                                fix="set data.label_names=[...] in class-id order") from None
            yi = names.index(str(y))
        labels.append(yi)
    if bad:
        from quantkit.data.table import rows_phrase, values_phrase

        one = len(bad) == 1
        raise DataError(f"{len(bad)} label{'' if one else 's'} missing or not finite",
                        where=f"{rows_phrase([i for i, _ in bad])} column {cfg.label_column}",
                        value=values_phrase(bad),
                        fix=f"fill in or remove {'that row' if one else 'those rows'}, or set "
                            "data.label_column=null for a label-free run")
    if not images:
        raise DataError("no images in the dataset split", where="data.path", value=cfg.path,
                        fix="check data.train_split / data.eval_split")
    log.info("hub images: %d images, %s", len(images),
             "label-free" if label_free else f"{len(names) or 'unnamed'} classes")
    if label_free:
        return np.stack(images), None, names
    from quantkit.data.table import check_label_ids

    y = np.asarray(labels, dtype=np.int64)
    return np.stack(images), y, check_label_ids(y, names)


# --------------------------------------------------------------------------- preprocessing


@dataclass(frozen=True)
class ImagePreprocess:
    """How uint8 images become model input: resize to size x size, channels, normalization."""

    size: int = 112
    channels: int = 3  # 3: grayscale replicated; 1: RGB reduced to luma
    mean: tuple[float, ...] = IMAGENET_MEAN  # per channel, on the [0, 1] scale
    std: tuple[float, ...] = IMAGENET_STD
    resize: str = "bilinear"  # bilinear (align_corners=False, as torch) | none
    channel_order: str = "RGB"  # RGB | BGR: the model's channel order (mean/std in that order)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if self.channels not in (1, 3):
            raise ConfigError("unsupported channel count", where="preprocess.channels",
                              value=self.channels, fix="use 3 (RGB; grayscale replicated) or 1")
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ConfigError("mean/std need one value per channel", where="preprocess.mean/std",
                              value=(self.mean, self.std), fix=f"give {self.channels} values each")
        if any(s <= 0 for s in self.std):
            raise ConfigError("std must be positive", where="preprocess.std", value=self.std,
                              fix="use positive values, e.g. ImageNet's (0.229, 0.224, 0.225)")
        if self.resize not in ("bilinear", "none"):
            raise ConfigError("unsupported resize mode", where="preprocess.resize",
                              value=self.resize, fix="use bilinear or none")
        if self.size < 1:
            raise ConfigError("size must be positive", where="preprocess.size", value=self.size,
                              fix="use e.g. 112 or 224")
        if self.channel_order not in ("RGB", "BGR"):
            raise ConfigError("unsupported channel order", where="data.image.channel_order",
                              value=self.channel_order, fix="use RGB or BGR")

    def to_dict(self) -> dict:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        if d["channel_order"] == "RGB":  # the default before the option existed: keep keys
            del d["channel_order"]
        return d

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return preprocess(images, self)


@functools.lru_cache(maxsize=32)
def bilinear_taps(in_size: int, out_size: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, w0, w1) per output pixel: 1-D linear interpolation, as torch's align_corners=False.

    Source coordinate of output pixel d: (d + 0.5) * in / out - 0.5, clamped at 0; the two
    neighbours i0 = floor(src), i1 = min(i0 + 1, in - 1) get float32 weights 1 - frac, frac
    (computed in float64, then rounded once). At the last input pixel (i0 == i1) the taps
    merge into weight 1 on i0 and 0 on i1, so an edge pixel is copied exactly.
    """
    scale = in_size / out_size
    src = np.maximum((np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.intp), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    frac = np.where(i1 == i0, 0.0, src - i0)
    taps = (i0, i1, (1.0 - frac).astype(np.float32), frac.astype(np.float32))
    for a in taps:
        a.flags.writeable = False
    return taps


def bilinear_matrix(in_size: int, out_size: int) -> np.ndarray:
    """[out, in] float32 matrix of :func:`bilinear_taps`; for inspection (resizing uses taps)."""
    i0, i1, w0, w1 = bilinear_taps(in_size, out_size)
    m = np.zeros((out_size, in_size), dtype=np.float32)
    rows = np.arange(out_size)
    m[rows, i0] = w0
    m[rows, i1] += w1
    return m


def _resize_axis(x: np.ndarray, axis: int, out_size: int) -> np.ndarray:
    """Bilinear resize of one axis of float32 ``x``: w0 * x[i0] + w1 * x[i1], elementwise.

    A gather and three elementwise float32 operations (each rounded once, in this order), so
    the result is the same bytes on every BLAS kernel and SIMD width; a matrix product would
    round per kernel (OpenBLAS Haswell vs SkylakeX gave other pixels, issue 48 point 7).
    """
    if x.shape[axis] == out_size:
        return x  # the taps would be the identity (weights 1 and 0)
    i0, i1, w0, w1 = bilinear_taps(x.shape[axis], out_size)
    shape = [1] * x.ndim
    shape[axis] = out_size
    out = np.take(x, i0, axis=axis)
    out *= w0.reshape(shape)
    far = np.take(x, i1, axis=axis)
    far *= w1.reshape(shape)
    out += far
    return out


def _luma(x: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma of float32 RGB [N,3,H,W] -> [N,1,H,W], as Pillow's "L": the weighted
    sum of red and green, then blue, in float32, elementwise in that fixed order (no BLAS)."""
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    y = np.float32(0.299) * r
    y += np.float32(0.587) * g
    y += np.float32(0.114) * b
    return y


def _as_nchw(images: np.ndarray) -> np.ndarray:
    """uint8 [N,H,W] / [N,H,W,C] -> float32 [N,C,H,W] on [0, 1]."""
    x = np.asarray(images)
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3, 4):
        x = x[..., :3].transpose(0, 3, 1, 2)  # RGBA: alpha dropped
    else:
        raise DataError("images must be [N, H, W] or [N, H, W, C] with C in 1, 3, 4",
                        where="images", value=x.shape, fix="pass a batch of HW or HWC images")
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    if np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float32, copy=False)
    raise DataError("images must be uint8 (0..255) or float (0..1)", where="images",
                    value=str(x.dtype), fix="convert with .astype(np.uint8)")


def preprocess(images: np.ndarray, config: ImagePreprocess = ImagePreprocess()) -> np.ndarray:
    """uint8 images [N,H,W] or [N,H,W,C] -> float32 [N, channels, size, size], normalized.

    Channel changes happen before resizing (gray is resized once, then replicated).
    """
    x = _as_nchw(images)
    c_in = x.shape[1]
    if config.channels == 1 and c_in == 3:  # ITU-R 601 luma, as Pillow's "L"
        x = _luma(x)
    n, c, h, w = x.shape
    if config.resize == "bilinear" and (h, w) != (config.size, config.size):
        x = _resize_axis(_resize_axis(x, 2, config.size), 3, config.size)  # rows, then columns
    elif (h, w) != (config.size, config.size):
        raise DataError("image size differs from preprocess.size and resize is none",
                        where="images", value=(h, w), fix="set preprocess.resize=bilinear")
    if config.channels == 3 and c == 1:
        x = np.broadcast_to(x, (n, 3, config.size, config.size))
    elif config.channels == 3 and config.channel_order == "BGR":
        x = x[:, ::-1]
    mean = np.asarray(config.mean, np.float32)[None, :, None, None]
    inv_std = (1.0 / np.asarray(config.std, np.float64)).astype(np.float32)[None, :, None, None]
    return np.ascontiguousarray((x - mean) * inv_std, dtype=np.float32)


_preprocess = preprocess  # iter_image_feeds' argument named ``preprocess`` shadows it


def iter_image_feeds(images: np.ndarray, batch_size: int, preprocess: ImagePreprocess,
                     input_name: str = "input"
                     ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Yield (indices, {input_name: float32 batch}) in order; preprocessing per batch only."""
    if batch_size < 1:
        raise ConfigError("batch size must be positive", where="data.batch_size",
                          value=batch_size, fix="use e.g. 64")
    for start in range(0, len(images), batch_size):
        idx = np.arange(start, min(start + batch_size, len(images)))
        yield idx, {input_name: _preprocess(images[start:start + len(idx)], preprocess)}


def images_sha256(images: np.ndarray, labels: Sequence[int] | np.ndarray | None = None) -> str:
    """sha256 over shape, dtype, pixels (and labels): the data part of cache keys."""
    x = np.ascontiguousarray(images)
    h = hashlib.sha256(f"{x.dtype.str}{x.shape}".encode())
    h.update(x.reshape(-1).view(np.uint8) if x.size else b"")
    if labels is not None:
        y = np.ascontiguousarray(np.asarray(labels, dtype=np.int64))
        h.update(b"labels")
        h.update(y.view(np.uint8))
    return h.hexdigest()
