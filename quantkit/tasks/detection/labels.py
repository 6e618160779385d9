"""Box labels: COCO JSON or a YOLO txt folder -> :class:`BoxLabels`, checked.

Every bad input is one :class:`~quantkit.errors.DataError` that says what, where (file, and
annotation id or line), the offending value and the fix: an empty or unreadable labels file,
annotations naming images that are not in the labels or not on disk, boxes outside their
image or of no area, class ids or names beyond the model's classes, a YOLO label file without
its image. An image without objects is valid (COCO: an image without annotations; YOLO: an
empty or absent ``.txt``).

Boxes are kept as x1, y1, x2, y2 in the image's own pixels, classes as the model's 0-based
class index.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from quantkit.errors import DataError, Phrase

log = logging.getLogger(__name__)

__all__ = ["BoxLabels", "IMAGE_SUFFIXES", "load_coco_labels", "load_yolo_labels",
           "labels_from_arrays"]

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
#: How far (pixels) a COCO box may reach past its image before it is refused: float
#: coordinates of a box drawn to the last pixel column end at ``width`` exactly; one more pixel
#: absorbs rounding in the tools that wrote them.
EDGE_TOLERANCE_PX = 1.0
#: The same for YOLO's normalized coordinates.
EDGE_TOLERANCE_NORM = 1e-3


@dataclass(frozen=True)
class BoxLabels:
    """Ground-truth boxes of a set of images.

    ``file_names[i]``, ``heights[i]`` / ``widths[i]`` (pixels); ``boxes[i]`` float32 [n_i, 4]
    x1, y1, x2, y2; ``classes[i]`` int64 [n_i] (0-based, < ``len(class_names)``);
    ``groups``: one key per image (e.g. a page template) or None.
    """

    file_names: list[str]
    heights: np.ndarray
    widths: np.ndarray
    boxes: list[np.ndarray]
    classes: list[np.ndarray]
    class_names: list[str]
    groups: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.file_names)

    @property
    def n_boxes(self) -> int:
        return int(sum(len(c) for c in self.classes))

    def subset(self, index: Sequence[int]) -> "BoxLabels":
        idx = [int(i) for i in index]
        return BoxLabels([self.file_names[i] for i in idx], self.heights[idx], self.widths[idx],
                         [self.boxes[i] for i in idx], [self.classes[i] for i in idx],
                         list(self.class_names),
                         None if self.groups is None else [self.groups[i] for i in idx])


def _listing(items: Sequence[Any], limit: int = 3) -> Phrase:
    shown = ", ".join(str(x) for x in items[:limit])
    return Phrase(shown + (f" (+{len(items) - limit} more)" if len(items) > limit else ""))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError("labels file not found", where=str(path), value=str(path),
                        fix="check data.labels (a COCO JSON file or a YOLO labels folder)")
    raw = path.read_bytes()
    if not raw.strip():
        raise DataError("the labels file is empty", where=str(path), value=Phrase("0 bytes")
                        if not raw else Phrase("only whitespace"),
                        fix="write the COCO JSON (images, annotations, categories), or point "
                            "data.labels at the right file")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError("the labels file is not valid JSON", where=str(path),
                        value=Phrase(str(exc)), fix="write COCO JSON") from exc


def labels_from_arrays(file_names, heights, widths, boxes, classes, class_names,
                       groups=None) -> BoxLabels:
    """:class:`BoxLabels` from in-memory arrays (a renderer's own labels), checked as a file
    would be."""
    b = [np.asarray(x, np.float32).reshape(-1, 4) for x in boxes]
    c = [np.asarray(x, np.int64).reshape(-1) for x in classes]
    lab = BoxLabels(list(file_names), np.asarray(heights, np.int64), np.asarray(widths, np.int64),
                    b, c, list(class_names), None if groups is None else list(groups))
    _check_boxes(lab, "labels")
    return lab


def _check_boxes(lab: BoxLabels, where: str) -> None:
    bad_cls, bad_box = [], []
    k = len(lab.class_names)
    for i, (b, c) in enumerate(zip(lab.boxes, lab.classes)):
        for j in np.flatnonzero((c < 0) | (c >= k)):
            bad_cls.append(f"{lab.file_names[i]} box {j}: class {int(c[j])}")
        w, h = float(lab.widths[i]), float(lab.heights[i])
        t = EDGE_TOLERANCE_PX
        out = ((b[:, 0] < -t) | (b[:, 1] < -t) | (b[:, 2] > w + t) | (b[:, 3] > h + t) |
               (b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1]) | ~np.isfinite(b).all(axis=1))
        for j in np.flatnonzero(out):
            bad_box.append(f"{lab.file_names[i]} box {j}: {np.round(b[j], 1).tolist()} in "
                           f"{int(w)}x{int(h)}")
    if bad_cls:
        raise DataError(f"{len(bad_cls)} class id(s) beyond the model's {k} classes",
                        where=where, value=_listing(bad_cls),
                        fix=f"class ids are 0..{k - 1} ({', '.join(lab.class_names[:5])}"
                            f"{', ...' if k > 5 else ''})")
    if bad_box:
        raise DataError(f"{len(bad_box)} box(es) outside their image or of no area",
                        where=where, value=_listing(bad_box),
                        fix="boxes are x1 < x2 <= width, y1 < y2 <= height in the image's pixels")


def load_coco_labels(path: str | os.PathLike, *, class_names: Sequence[str] | None = None,
                     n_classes: int | None = None, image_dir: str | os.PathLike | None = None,
                     group_field: str | None = None) -> BoxLabels:
    """COCO JSON (``images``, ``annotations`` with ``bbox`` [x, y, w, h], ``categories``).

    Categories map to the model's classes by name when ``class_names`` is given (every
    category name must be one of them), else by the order of their ids (at most
    ``n_classes`` categories). ``image_dir``: every image must exist there. ``group_field``: an
    image-level field holding each image's group (e.g. ``template``).
    """
    p = Path(path).expanduser()
    doc = _read_json(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise DataError("not COCO JSON: no 'images' list", where=str(p),
                        value=type(doc).__name__ if not isinstance(doc, dict)
                        else Phrase(f"keys {sorted(doc)[:6]}"),
                        fix="write images, annotations and categories")
    images = doc["images"]
    if not images:
        raise DataError("the labels name no images", where=f"{p} images", value=Phrase("[]"),
                        fix="list every image (with width and height), with or without objects")
    anns = doc.get("annotations") or []
    cats = doc.get("categories") or []
    try:
        ids = [int(im["id"]) for im in images]
        names = [str(im["file_name"]) for im in images]
        heights = np.array([int(im["height"]) for im in images], np.int64)
        widths = np.array([int(im["width"]) for im in images], np.int64)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError("an image entry lacks id, file_name, width or height", where=
                        f"{p} images", value=Phrase(repr(exc)),
                        fix="give every image id, file_name, width and height") from exc
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise DataError("image ids repeat", where=f"{p} images", value=_listing(dup),
                        fix="give each image its own id")
    if image_dir is not None:
        folder = Path(image_dir).expanduser()
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise DataError(f"the labels name {len(missing)} image(s) that are not there",
                            where=str(folder), value=_listing(missing),
                            fix="put the images in data.image_dir, or remove their entries "
                                "from the labels")
    cat_ids = sorted(int(c["id"]) for c in cats)
    cat_name = {int(c["id"]): str(c.get("name", c["id"])) for c in cats}
    if class_names is not None:
        known = {n: i for i, n in enumerate(class_names)}
        unknown = [f"{cid} {cat_name[cid]!r}" for cid in cat_ids if cat_name[cid] not in known]
        if unknown:
            raise DataError(f"{len(unknown)} categor{'y' if len(unknown) == 1 else 'ies'} not "
                            "among the model's classes", where=f"{p} categories",
                            value=_listing(unknown),
                            fix=f"name categories as the model's classes: {list(class_names)}")
        to_class = {cid: known[cat_name[cid]] for cid in cat_ids}
        out_names = list(class_names)
    else:
        if n_classes is not None and len(cat_ids) > n_classes:
            raise DataError(f"{len(cat_ids)} categories but the model has {n_classes} classes",
                            where=f"{p} categories", value=_listing(cat_ids),
                            fix="keep only the model's classes in the labels")
        to_class = {cid: i for i, cid in enumerate(cat_ids)}
        k = n_classes if n_classes is not None else len(cat_ids)
        out_names = [cat_name[c] for c in cat_ids] + [str(i) for i in range(len(cat_ids), k)]
    row = {iid: i for i, iid in enumerate(ids)}
    boxes: list[list] = [[] for _ in ids]
    classes: list[list] = [[] for _ in ids]
    orphans, unknown_cat, bad = [], [], []
    for a in anns:
        try:
            iid, cid = int(a["image_id"]), int(a["category_id"])
            x, y, w, h = (float(v) for v in a["bbox"])
        except (KeyError, TypeError, ValueError):
            bad.append(a.get("id", "?") if isinstance(a, dict) else "?")
            continue
        if iid not in row:
            orphans.append(f"annotation {a.get('id', '?')} -> image {iid}")
            continue
        if cid not in to_class:
            unknown_cat.append(f"annotation {a.get('id', '?')}: category {cid}")
            continue
        boxes[row[iid]].append((x, y, x + w, y + h))
        classes[row[iid]].append(to_class[cid])
    if bad:
        raise DataError(f"{len(bad)} annotation(s) lack image_id, category_id or a 4-number "
                        "bbox", where=f"{p} annotations", value=_listing(bad),
                        fix="write bbox as [x, y, width, height]")
    if orphans:
        raise DataError(f"{len(orphans)} annotation(s) name images that are not in the labels",
                        where=f"{p} annotations", value=_listing(orphans),
                        fix="add those images to 'images', or remove the annotations")
    if unknown_cat:
        raise DataError(f"{len(unknown_cat)} annotation(s) name a category that is not "
                        "declared (a class id beyond the model's classes)",
                        where=f"{p} annotations", value=_listing(unknown_cat),
                        fix=f"use the declared category ids {cat_ids[:10]}")
    groups = None
    if group_field is not None:
        lacking = [n for n, im in zip(names, images) if group_field not in im]
        if lacking:
            raise DataError(f"{len(lacking)} image(s) lack the group field", where=
                            f"{p} images", value=_listing(lacking),
                            fix=f"give every image a {group_field!r}, or unset "
                                "data.group_column")
        groups = [im[group_field] for im in images]
    lab = BoxLabels(names, heights, widths,
                    [np.asarray(b, np.float32).reshape(-1, 4) for b in boxes],
                    [np.asarray(c, np.int64) for c in classes], out_names, groups)
    _check_boxes(lab, str(p))
    log.info("labels: %d images, %d boxes, %d classes from %s", len(lab), lab.n_boxes,
             len(out_names), p)
    return lab


def image_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    try:
        with Image.open(path) as im:
            w, h = im.size
            if im.getexif().get(0x0112, 1) in (5, 6, 7, 8):  # EXIF orientation: read upright
                w, h = h, w
    except OSError as exc:
        raise DataError("cannot read the image", where=str(path), value=Phrase(str(exc)),
                        fix="replace or remove the file") from exc
    return h, w


def load_yolo_labels(label_dir: str | os.PathLike, image_dir: str | os.PathLike, *,
                     n_classes: int, class_names: Sequence[str] | None = None) -> BoxLabels:
    """A YOLO txt folder: ``<label_dir>/<image stem>.txt``, one ``class cx cy w h`` line per
    box (normalized to the image). An empty or absent file is an image without objects; a
    label file whose image is not in ``image_dir`` is an error, as is a folder with no label
    files at all."""
    ld, idir = Path(label_dir).expanduser(), Path(image_dir).expanduser()
    for d, what in ((ld, "labels folder"), (idir, "image folder")):
        if not d.is_dir():
            raise DataError(f"{what} not found", where=str(d), value=str(d),
                            fix="check data.labels and data.image_dir")
    images = sorted(q for q in idir.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise DataError("no images in the image folder", where=str(idir), value=0,
                        fix=f"put images ({', '.join(IMAGE_SUFFIXES)}) there")
    txts = sorted(ld.glob("*.txt"))
    stems = {q.stem for q in images}
    orphans = [q.name for q in txts if q.stem not in stems]
    if orphans:
        raise DataError(f"{len(orphans)} label file(s) name images that are not there",
                        where=str(ld), value=_listing(orphans),
                        fix=f"put their images in {idir}, or remove the label files")
    if not txts:
        raise DataError("the labels folder holds no .txt label files", where=str(ld),
                        value=0, fix="write one <image stem>.txt per image (empty: no objects)")
    names = list(class_names) if class_names is not None else [str(i) for i in range(n_classes)]
    if len(names) != n_classes:
        raise DataError("class names and the model's class count differ", where="class_names",
                        value=(len(names), n_classes), fix="give one name per model class")
    heights, widths, boxes, classes = [], [], [], []
    bad: list[str] = []
    for im in images:
        h, w = image_size(im)
        heights.append(h)
        widths.append(w)
        txt = ld / f"{im.stem}.txt"
        rows = []
        if txt.is_file():
            for n, line in enumerate(txt.read_text(encoding="utf-8").splitlines(), 1):
                parts = line.split()
                if not parts:
                    continue
                try:
                    c = int(parts[0])
                    cx, cy, bw, bh = (float(v) for v in parts[1:5])
                    if len(parts) != 5:
                        raise ValueError
                except ValueError:
                    bad.append(f"{txt.name}:{n} {line.strip()[:40]!r}")
                    continue
                if not 0 <= c < n_classes:
                    raise DataError(f"class id beyond the model's {n_classes} classes",
                                    where=f"{txt}:{n}", value=c,
                                    fix=f"class ids are 0..{n_classes - 1}")
                t = EDGE_TOLERANCE_NORM
                x1, y1, x2, y2 = cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2
                if bw <= 0 or bh <= 0 or x1 < -t or y1 < -t or x2 > 1 + t or y2 > 1 + t:
                    raise DataError("box outside its image or of no area", where=f"{txt}:{n}",
                                    value=Phrase(line.strip()),
                                    fix="cx cy w h are normalized to the image: the box lies "
                                        "within 0..1")
                rows.append((c, x1 * w, y1 * h, x2 * w, y2 * h))
        a = np.asarray(rows, np.float64).reshape(-1, 5)
        boxes.append(a[:, 1:].astype(np.float32))
        classes.append(a[:, 0].astype(np.int64))
    if bad:
        raise DataError(f"{len(bad)} malformed label line(s)", where=str(ld),
                        value=_listing(bad), fix="each line is: class cx cy w h")
    lab = BoxLabels([q.name for q in images], np.asarray(heights, np.int64),
                    np.asarray(widths, np.int64), boxes, classes, names)
    _check_boxes(lab, str(ld))
    return lab
