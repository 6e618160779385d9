"""Feeds of a detector: image files -> the model's input, batch by batch, the way the
:class:`~quantkit.data.feeds.Feeds` protocol gives every stage its batches (calibration, the
FP16 range check, evaluation, per-layer runs, latency), and the way back: each batch's raw
outputs -> detections in the images' own pixels (:meth:`DetectionFeeds.decode`).

Images are read from their files when their batch comes (memory O(batch)); a model with a
fixed batch of 1 is fed one image at a time (``batch_size_for``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from quantkit.data.feeds import batch_size_for
from quantkit.data.images import PREPROCESS_VERSION
from quantkit.errors import DataError
from quantkit.tasks.detection.boxes import Detections
from quantkit.tasks.detection.kind import DetectionKind
from quantkit.tasks.detection.preprocess import BoxTransform

__all__ = ["DetectionFeeds"]


def _split(data: Any):
    if not hasattr(data, "files"):
        raise DataError("a detector is fed image files with their sizes (a detection split)",
                        where="data.kind", value=type(data).__name__,
                        fix="use data.kind=detection (data=detection_folder or layout_pages)")
    return data


def _check_size(split, i: int, image: np.ndarray) -> None:
    """The image as read has the size its labels give (boxes go back to those pixels)."""
    h, w = int(split.heights[i]), int(split.widths[i])
    if image.shape[:2] != (h, w):
        raise DataError("an image's size differs from the size its labels give",
                        where=str(split.files[i]),
                        value=f"{image.shape[1]}x{image.shape[0]} read, {w}x{h} in the labels",
                        fix="correct width / height in the labels (COCO JSON), or save the "
                            "image upright without an EXIF rotation")


class DetectionFeeds:
    """Batches of a :class:`~quantkit.tasks.detection.dataset.DetectionSplit` for the
    detector ``detector`` (its preprocessing, input name, fixed batch and decoder)."""

    kind = "detection"
    pooling = "none"

    def __init__(self, detector: DetectionKind) -> None:
        self.detector = detector
        self.input_names = [detector.input_name]
        self.fixed_batch = detector.fixed_batch

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.detector.outputs]

    def pool(self, output: np.ndarray, feed: dict[str, np.ndarray]) -> np.ndarray:
        return output

    def lengths(self, data: Any) -> None:
        _split(data)
        return None

    def batches(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
                ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        split = _split(data)
        bs = batch_size_for(self, batch_size)
        for start in range(0, len(split), bs):
            idx = np.arange(start, min(start + bs, len(split)))
            images = [split.read(int(i)) for i in idx]
            for i, im in zip(idx, images):
                _check_size(split, int(i), im)
            x, _ = self.detector.preprocess(images)
            yield idx, {self.input_names[0]: x}

    def feeds(self, data: Any, batch_size: int, *, lengths: np.ndarray | None = None
              ) -> Iterator[dict[str, np.ndarray]]:
        return (feed for _, feed in self.batches(data, batch_size))

    def slices(self, lengths: np.ndarray | None) -> dict[str, np.ndarray]:
        return {}

    def transforms(self, data: Any, idx: Sequence[int]) -> list[BoxTransform]:
        """Where each image ``idx`` of ``data`` lands in the model input."""
        split = _split(data)
        return [self.detector.preprocess.transform(int(split.heights[i]), int(split.widths[i]))
                for i in idx]

    def decode(self, data: Any, idx: Sequence[int], outputs: dict[str, np.ndarray]
               ) -> list[Detections]:
        """One batch's raw outputs -> the detections of images ``idx`` of ``data``."""
        return self.detector.decode_batch([outputs[n] for n in self.output_names],
                                          self.transforms(data, idx))

    def cache_key(self) -> dict:
        """The detector's decoder, thresholds, preprocessing and classes, and the resize
        implementation's version."""
        return {"detector": self.detector.describe(), "preprocess_version": PREPROCESS_VERSION,
                **({"fixed_batch": self.fixed_batch} if self.fixed_batch is not None else {})}

    def describe(self) -> dict:
        return {"kind": self.kind, "inputs": self.input_names,
                "preprocess": self.detector.preprocess.to_dict(),
                "decoder": self.detector.decoder,
                **({"fixed_batch": self.fixed_batch} if self.fixed_batch is not None else {})}
