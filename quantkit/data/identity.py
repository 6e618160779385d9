"""What one example *is* for the persistent test ledger: its source content, before any
preprocessing (quantkit/verdict/ledger.py, "Example"). Pure: hashlib, unicodedata, numpy.

* **Text**: the text in Unicode normalization form NFC, stripped, every run of whitespace
  collapsed to one space (:func:`normalize_text`). A trailing space, a non-breaking space or
  a decomposed accent does not make a new example; tokenizer, ``data.max_length`` and
  truncation never enter.
* **Image file** (a local folder, a hub row that carries its encoded bytes): the file's
  bytes (:func:`image_file_id`). ``data.image.size``, ``channels``, ``alpha``, resizing and
  normalization never enter.
* **Decoded image** (Fashion-MNIST's IDX arrays, a hub row that holds decoded pixels): the
  pixels as decoded, at source size (:func:`image_array_id`).

Labels are not part of an example (a relabelled copy is the same example). The text and
array forms hash the same bytes as the first ledger (``quantkit-test-ledger/1``) did for a
text that needs no normalization and for an image at its source size, so looks that ledger
recorded keep matching.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Iterable

import numpy as np

__all__ = ["RULE", "image_array_id", "image_file_id", "image_pil_id", "normalize_text",
           "text_id", "text_ids"]

#: the rule's name as the ledger and the record state it
RULE = ("source content before preprocessing: text NFC-normalized, stripped, whitespace "
        "runs collapsed; an image file's bytes, or decoded pixels at source size")


def normalize_text(text: str) -> str:
    """``text`` in NFC with its whitespace stripped and every run of it one space."""
    return " ".join(unicodedata.normalize("NFC", str(text)).split())


def text_id(text: str) -> bytes:
    """sha256 of one text's normalized content (module docstring)."""
    return hashlib.sha256(b"text\x1f" + normalize_text(text).encode("utf-8")).digest()


def text_ids(texts: Iterable[str]) -> list[bytes]:
    return [text_id(t) for t in texts]


def image_array_id(pixels: np.ndarray) -> bytes:
    """sha256 of one decoded image at source size: dtype, shape and pixels."""
    x = np.ascontiguousarray(pixels)
    h = hashlib.sha256(f"image\x1f{x.dtype.str}{x.shape}".encode())
    h.update(x.reshape(-1).view(np.uint8) if x.size else b"")
    return h.digest()


def image_file_id(data: bytes) -> bytes:
    """sha256 of one image file's bytes (as stored: PNG, JPEG...)."""
    return hashlib.sha256(b"image-file\x1f" + bytes(data)).digest()


def image_pil_id(image) -> bytes:
    """A PIL image's identity: its file's bytes where it was opened from one, else its pixels
    as decoded (mode, size), before any conversion or resize."""
    name = getattr(image, "filename", "") or ""
    if name:
        with open(name, "rb") as f:
            return image_file_id(f.read())
    h = hashlib.sha256(f"image-pil\x1f{image.mode}{image.size}".encode())
    h.update(image.tobytes())
    return h.digest()
