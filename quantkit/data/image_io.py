"""Read image files of any bit depth and mode into uint8 arrays, and users' image folders.

Pillow opens files in many modes; ``im.convert("RGB")`` is wrong for some of them (a 16-bit
grayscale PNG, mode ``I;16``, comes out 99% saturated at 255). :func:`to_uint8` handles each:

- 1, L, P, RGB, CMYK, YCbCr, LAB, HSV: converted by Pillow (palettes expanded, CMYK and
  the colour spaces to RGB);
- I;16 / I;16B / I;16L (16-bit gray): scaled to 8 bits, round(v * 255 / 65535);
- 16-bit RGB(A) PNGs: Pillow keeps the high byte of each channel;
- transparency (RGBA, LA, PA, P or L/RGB with a transparent colour): composited over white
  or black, or the alpha channel dropped (``data.image.alpha``);
- I (32-bit integer) and F (32-bit float): refused with the fix (their range is unknown);
- EXIF orientation is applied, so a phone photo is read upright; a multi-frame file
  (GIF, TIFF) gives its first frame.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from quantkit.data.identity import image_file_id
from quantkit.errors import ConfigError, DataError, first_line

log = logging.getLogger(__name__)

__all__ = ["IMAGE_SUFFIXES", "ALPHA_MODES", "to_uint8", "read_image", "load_image_folder"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
ALPHA_MODES = ("white", "black", "drop")
_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")
_WITH_ALPHA = ("RGBA", "LA", "PA", "La", "RGBa")
_BACKGROUND = {"white": 255, "black": 0}


def _pil():
    try:
        from PIL import Image, ImageOps
    except ImportError as exc:
        raise DataError("reading image files needs Pillow", where="data.path",
                        value=f"{type(exc).__name__}: {exc}", fix="pip install pillow") from exc
    return Image, ImageOps


def _has_alpha(im) -> bool:
    return im.mode in _WITH_ALPHA or "transparency" in im.info


def to_uint8(im, *, mode: str = "RGB", alpha: str = "white", where: str = "image") -> np.ndarray:
    """A Pillow image -> uint8 array [H, W, C] (C = 3 for mode RGB, 1 for L)."""
    Image, _ = _pil()
    if mode not in ("RGB", "L"):
        raise ConfigError("unsupported image mode", where="mode", value=mode, fix="use RGB or L")
    if alpha not in ALPHA_MODES:
        raise ConfigError("unsupported alpha handling", where="data.image.alpha", value=alpha,
                          fix=f"use one of {list(ALPHA_MODES)}")
    if im.mode in _SIXTEEN_BIT:
        a = np.asarray(im).astype(np.uint32)
        gray = ((a * 255 + 32767) // 65535).astype(np.uint8)
        im = Image.fromarray(gray, mode="L")
    elif im.mode in ("I", "F"):
        raise DataError(f"image mode {im.mode} ({'32-bit integer' if im.mode == 'I' else '32-bit float'}"
                        " pixels) has no known value range", where=where, value=im.mode,
                        fix="save it as an 8- or 16-bit PNG or TIFF (values 0..255 or 0..65535)")
    if _has_alpha(im):
        rgba = im.convert("RGBA")
        if alpha == "drop":
            im = rgba.convert("RGB")
        else:
            bg = Image.new("RGBA", rgba.size, (_BACKGROUND[alpha],) * 3 + (255,))
            im = Image.alpha_composite(bg, rgba).convert("RGB")
    try:
        im = im.convert(mode)
    except (ValueError, OSError) as exc:
        raise DataError(f"cannot convert image mode {im.mode} to {mode}", where=where,
                        value=im.mode, fix="save the image as RGB or grayscale PNG/JPEG") from exc
    arr = np.asarray(im, dtype=np.uint8)
    return arr if arr.ndim == 3 else arr[..., None]


def read_image(path: str | os.PathLike, *, mode: str = "RGB", size: int | None = None,
               alpha: str = "white") -> np.ndarray:
    """One image file -> uint8 [H, W, C] (resized to size x size, bilinear, when given)."""
    Image, ImageOps = _pil()
    f = Path(path)
    try:
        with Image.open(f) as im:
            im.seek(0)
            im = ImageOps.exif_transpose(im)
            arr = to_uint8(im, mode=mode, alpha=alpha, where=str(f))
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow: unreadable / truncated file
        raise DataError(f"could not read an image ({type(exc).__name__})", where=str(f),
                        value=first_line(exc),
                        fix="remove or replace the file") from exc
    if size is not None and arr.shape[:2] != (size, size):  # resize after conversion
        im = Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
        arr = np.asarray(im.resize((size, size), Image.Resampling.BILINEAR), dtype=np.uint8)
        arr = arr if arr.ndim == 3 else arr[..., None]
    return arr


def _image_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES and not f.name.startswith("."))


def load_image_folder(path: str | os.PathLike, *, size: int | None = None, mode: str = "RGB",
                      alpha: str = "white", labeled: bool | None = None,
                      source_ids: list[bytes] | None = None
                      ) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """Users' images: (uint8 images [N,H,W,C], labels or None, class names).

    A folder with one subfolder per class is labeled (classes are the sorted subfolder
    names); a folder of images without subfolders is label-free (labels None, no
    classes). ``labeled=False`` reads the images of every subfolder without labels.
    With ``size`` each image is resized to size x size (bilinear), else all must share
    one size. ``source_ids``: a list that gets each image's identity for the test ledger,
    the file's bytes (quantkit.data.identity), in the order of the images.
    """
    if mode not in ("RGB", "L"):
        raise ConfigError("unsupported image mode", where="mode", value=mode, fix="use RGB or L")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataError("image folder not found", where="data.path", value=str(root),
                        fix="point it at a folder of images, or one subfolder of images per class")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    loose = _image_files(root)
    if labeled is None:
        if loose and classes:
            raise DataError("the image folder holds both images and subfolders", where=str(root),
                            value=f"{len(loose)} images beside subfolders {classes[:5]}",
                            fix="move the loose images into class subfolders (labeled), or set "
                                "data.label_column=null to read every image without labels")
        labeled = bool(classes)
    files: list[tuple[Path, int | None]] = []
    if labeled:
        for label, name in enumerate(classes):
            files.extend((f, label) for f in _image_files(root / name))
    else:
        files.extend((f, None) for f in loose)
        for name in classes:
            files.extend((f, None) for f in _image_files(root / name))
    if not files:
        raise DataError("no images found", where=str(root), value=classes,
                        fix=f"put images ({', '.join(IMAGE_SUFFIXES)}) into the folder or into "
                            "one subfolder per class")
    images = [read_image(f, mode=mode, size=size, alpha=alpha) for f, _ in files]
    if source_ids is not None:
        source_ids.extend(image_file_id(f.read_bytes()) for f, _ in files)
    shapes = {a.shape for a in images}
    if len(shapes) > 1:
        raise DataError("images differ in size", where=str(root),
                        value=sorted(shapes)[:3], fix="set data.image.size to resize them all")
    log.info("image folder %s: %d images, %s", root, len(images),
             f"{len(classes)} classes" if labeled else "label-free")
    labels = np.asarray([y for _, y in files], dtype=np.int64) if labeled else None
    return np.stack(images), labels, (classes if labeled else [])
