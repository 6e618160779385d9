"""A split's detections as one value: every image's boxes, scores and classes packed into
one float32 array ``rows [D, 6]`` (x1, y1, x2, y2, score, class) and ``offsets [n + 1]``
(image i's detections are ``rows[offsets[i]:offsets[i + 1]]``).

What the run keeps of a detector's outputs on a split (the stage cache stores the two arrays)
and what its stages cut the way they cut other outputs: ``len()`` is the number of images,
``packed[:n]`` the first n images, ``packed[index]`` the images at ``index`` (repeats
allowed). numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from quantkit.tasks.detection.boxes import Detections

__all__ = ["PackedDetections"]


@dataclass(frozen=True)
class PackedDetections:
    """Detections of ``len(self)`` images (module docstring)."""

    rows: np.ndarray
    offsets: np.ndarray

    def __post_init__(self) -> None:
        rows = np.asarray(self.rows, np.float32).reshape(-1, 6)
        offsets = np.asarray(self.offsets, np.int64).reshape(-1)
        if offsets.size < 1 or offsets[0] != 0 or offsets[-1] != rows.shape[0] \
                or np.any(np.diff(offsets) < 0):
            raise ValueError(f"offsets {offsets[:5]}... do not partition {rows.shape[0]} rows")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "offsets", offsets)

    @classmethod
    def of(cls, detections: Sequence[Detections]) -> "PackedDetections":
        counts = np.array([len(d) for d in detections], np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        if not detections or offsets[-1] == 0:
            return cls(np.zeros((0, 6), np.float32), offsets)
        rows = np.concatenate([np.column_stack([d.boxes, d.scores, d.classes.astype(np.float32)])
                               for d in detections]).astype(np.float32)
        return cls(rows, offsets)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "PackedDetections":
        """Read back what :meth:`arrays` wrote (a stage-cache entry)."""
        return cls(arrays["detections"], arrays["detection_offsets"])

    def arrays(self) -> dict[str, np.ndarray]:
        return {"detections": self.rows, "detection_offsets": self.offsets}

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def n_detections(self) -> int:
        return int(self.rows.shape[0])

    def image(self, i: int) -> Detections:
        r = self.rows[self.offsets[i]:self.offsets[i + 1]]
        return Detections(r[:, :4], r[:, 4], r[:, 5].astype(np.int64))

    def to_list(self) -> list[Detections]:
        return [self.image(i) for i in range(len(self))]

    def __getitem__(self, index) -> "PackedDetections":
        """The images at ``index`` (a slice, or integer indices; repeats allowed)."""
        idx = np.arange(len(self))[index] if isinstance(index, slice) else \
            np.asarray(index, np.int64).reshape(-1)
        return PackedDetections.of([self.image(int(i)) for i in idx])
