"""A detector's input: letterbox or plain resize to the model's fixed size, scale, mean / std,
channel order; and the way back: boxes in model-input pixels -> original image pixels.

* ``letterbox`` keeps the aspect ratio: scale ``r = min(H / h, W / w)``, resize to
  ``round(w r) x round(h r)``, pad with ``pad_value`` to H x W, the image centred
  (``anchor="center"``, ultralytics: ``round(pad - 0.1)`` before, the rest after) or at the
  top-left corner (``anchor="top_left"``, nudenet: the image is first padded right and
  bottom to the input's aspect, then that canvas is resized).
* ``plain`` stretches to H x W (PaddleDetection's PicoDet, rapid-layout).

The resize is :mod:`quantkit.data.images`' elementwise bilinear (torch's ``align_corners=False``
numbers, which are also OpenCV's ``INTER_LINEAR`` on float input, no antialiasing), so the
pixels are the same bytes on every BLAS kernel. Boxes go back through the exact geometric
inverse of what was done: ``(x - pad_x) * w / new_w`` (per axis), clipped to the image.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from quantkit.data.images import _resize_axis as resize_axis  # the elementwise two-tap resize
from quantkit.errors import ConfigError, DataError

__all__ = ["DetectionPreprocess", "BoxTransform", "FAMILY_PREPROCESS"]


@dataclass(frozen=True)
class BoxTransform:
    """How one image was placed in the model input: ``x_input = x * scale_x + pad_x``."""

    orig_w: int
    orig_h: int
    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """[N, 4] x1, y1, x2, y2 in model-input pixels -> original pixels, clipped."""
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        out = np.empty_like(b)
        out[:, 0::2] = np.clip((b[:, 0::2] - self.pad_x) / self.scale_x, 0.0, self.orig_w)
        out[:, 1::2] = np.clip((b[:, 1::2] - self.pad_y) / self.scale_y, 0.0, self.orig_h)
        return out.astype(np.float32)

    def to_input(self, boxes: np.ndarray) -> np.ndarray:
        """[N, 4] original pixels -> model-input pixels (for tests and drawing)."""
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        out = np.empty_like(b)
        out[:, 0::2] = b[:, 0::2] * self.scale_x + self.pad_x
        out[:, 1::2] = b[:, 1::2] * self.scale_y + self.pad_y
        return out.astype(np.float32)


@dataclass(frozen=True)
class DetectionPreprocess:
    """uint8 HWC images of any size -> float32 [N, 3, height, width].

    ``value = (pixel * scale - mean) / std`` per channel, in the model's ``channel_order``
    (mean / std are given in that order, as the model's own preprocessing applies them).
    """

    height: int
    width: int
    resize: str = "letterbox"  # letterbox | plain
    anchor: str = "center"  # letterbox only: center | top_left
    pad_value: int = 114
    scale: float = 1.0 / 255.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    channel_order: str = "RGB"  # RGB | BGR

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        where = "model.output.preprocess"
        if self.resize not in ("letterbox", "plain"):
            raise ConfigError("unknown resize mode", where=f"{where}.resize", value=self.resize,
                              fix="use letterbox (keep the aspect ratio, pad) or plain (stretch)")
        if self.anchor not in ("center", "top_left"):
            raise ConfigError("unknown letterbox anchor", where=f"{where}.anchor",
                              value=self.anchor, fix="use center or top_left")
        if self.channel_order not in ("RGB", "BGR"):
            raise ConfigError("unknown channel order", where=f"{where}.channel_order",
                              value=self.channel_order, fix="use RGB or BGR")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise ConfigError("mean and std need 3 values, std positive",
                              where=f"{where}.mean/std", value=(self.mean, self.std),
                              fix="e.g. mean [0.485, 0.456, 0.406], std [0.229, 0.224, 0.225]")
        if self.height < 1 or self.width < 1:
            raise ConfigError("input size must be positive", where=f"{where}.height/width",
                              value=(self.height, self.width),
                              fix="leave it to the model's fixed input shape")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    def transform(self, orig_h: int, orig_w: int) -> BoxTransform:
        """Where an image of ``orig_h x orig_w`` lands in the model input."""
        if self.resize == "plain":
            return BoxTransform(orig_w, orig_h, self.width / orig_w, self.height / orig_h,
                                0.0, 0.0)
        if self.anchor == "top_left":  # pad right / bottom to the input's aspect, resize
            canvas_w, canvas_h = self._top_left_canvas(orig_h, orig_w)
            return BoxTransform(orig_w, orig_h, self.width / canvas_w,
                                self.height / canvas_h, 0.0, 0.0)
        r = min(self.height / orig_h, self.width / orig_w)
        new_w, new_h = max(1, int(round(orig_w * r))), max(1, int(round(orig_h * r)))
        pad_x = int(round((self.width - new_w) / 2 - 0.1))
        pad_y = int(round((self.height - new_h) / 2 - 0.1))
        return BoxTransform(orig_w, orig_h, new_w / orig_w, new_h / orig_h, float(pad_x),
                            float(pad_y))

    def _top_left_canvas(self, orig_h: int, orig_w: int) -> tuple[int, int]:
        """(width, height) in original pixels of the image padded right / bottom to the
        input's aspect (nudenet: a square of the longer side)."""
        if orig_w * self.height >= orig_h * self.width:
            return orig_w, max(orig_h, int(round(orig_w * self.height / self.width)))
        return max(orig_w, int(round(orig_h * self.width / self.height))), orig_h

    def one(self, image: np.ndarray) -> tuple[np.ndarray, BoxTransform]:
        """One uint8 [H, W, 3] (or [H, W]) image -> float32 [3, height, width] and its
        transform."""
        x = np.asarray(image)
        if x.ndim == 2:
            x = np.repeat(x[..., None], 3, axis=2)
        if x.ndim != 3 or x.shape[2] not in (3, 4) or x.dtype != np.uint8:
            raise DataError("a detector's image must be uint8 [H, W, 3]", where="images",
                            value=f"{x.dtype} {x.shape}", fix="read images as RGB uint8")
        x = x[..., :3]
        h, w = x.shape[:2]
        t = self.transform(h, w)
        f = np.ascontiguousarray(x.transpose(2, 0, 1)).astype(np.float32)[None]
        if self.resize == "letterbox" and self.anchor == "top_left":
            cw, ch = self._top_left_canvas(h, w)
            padded = np.full((1, 3, ch, cw), float(self.pad_value), np.float32)
            padded[:, :, :h, :w] = f
            canvas = resize_axis(resize_axis(padded, 2, self.height), 3, self.width)[0]
        else:
            new_w = int(round(t.scale_x * w))
            new_h = int(round(t.scale_y * h))
            f = resize_axis(resize_axis(f, 2, new_h), 3, new_w)[0]  # rows, then columns
            canvas = np.full((3, self.height, self.width), float(self.pad_value), np.float32)
            px, py = int(t.pad_x), int(t.pad_y)
            canvas[:, py:py + new_h, px:px + new_w] = f
        if self.channel_order == "BGR":
            canvas = canvas[::-1]
        mean = np.asarray(self.mean, np.float32)[:, None, None]
        inv_std = (1.0 / np.asarray(self.std, np.float64)).astype(np.float32)[:, None, None]
        out = (canvas * np.float32(self.scale) - mean) * inv_std
        return np.ascontiguousarray(out, dtype=np.float32), t

    def __call__(self, images) -> tuple[np.ndarray, list[BoxTransform]]:
        """A list (or array) of images -> float32 [N, 3, height, width] and their transforms."""
        pairs = [self.one(im) for im in images]
        if not pairs:
            return np.zeros((0, 3, self.height, self.width), np.float32), []
        return np.stack([p[0] for p in pairs]), [p[1] for p in pairs]


#: Each family's own preprocessing, as its reference code does it (height and width come from
#: the model's input shape): ultralytics YOLOv5 / v8 / 11 (letterbox 114, RGB, /255),
#: PaddleDetection PicoDet as rapid-layout runs it (plain resize, ImageNet mean / std applied
#: to the BGR image cv2 reads: rapid_layout/model_handler/pp/pre_process.py), nudenet
#: (pad right and bottom with black, RGB, /255: nudenet/nudenet.py ``_read_image``).
FAMILY_PREPROCESS: dict[str, dict] = {
    "yolov8": dict(resize="letterbox", anchor="center", pad_value=114, channel_order="RGB"),
    "yolov5": dict(resize="letterbox", anchor="center", pad_value=114, channel_order="RGB"),
    "gfl": dict(resize="plain", channel_order="BGR", mean=(0.485, 0.456, 0.406),
                std=(0.229, 0.224, 0.225)),
    "nms": dict(resize="letterbox", anchor="center", pad_value=114, channel_order="RGB"),
    "nudenet": dict(resize="letterbox", anchor="top_left", pad_value=0, channel_order="RGB"),
}


def family_preprocess(family: str, height: int, width: int, **overrides) -> DetectionPreprocess:
    """The preprocessing of ``family`` (:data:`FAMILY_PREPROCESS`) at the model's input size,
    with ``overrides`` (any field of :class:`DetectionPreprocess`) on top."""
    if family not in FAMILY_PREPROCESS:
        raise ConfigError("no preprocessing defaults for this family",
                          where="model.output.preprocess", value=family,
                          fix=f"use one of {sorted(FAMILY_PREPROCESS)} or give every field")
    if not (isinstance(height, int) and isinstance(width, int)) or math.prod((height, width)) < 1:
        raise ConfigError("the model input size must be known", where="model input",
                          value=(height, width),
                          fix="set model.output.preprocess.height / width for a model with a "
                              "dynamic spatial size")
    return DetectionPreprocess(height=height, width=width,
                               **{**FAMILY_PREPROCESS[family], **overrides})
