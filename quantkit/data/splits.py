"""Seeded, disjoint train / calibration / eval splits of a labeled text table, with hashes."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np

from quantkit.errors import DataError
from quantkit.settings import DataConfig

log = logging.getLogger(__name__)


@dataclass
class TextSplit:
    """Texts with integer labels (and optional groups); ``sha256`` hashes texts + labels."""

    name: str
    texts: list[str]
    labels: np.ndarray
    groups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = np.asarray(self.labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for t, y in zip(self.texts, self.labels.tolist()):
            h.update(t.encode("utf-8"))
            h.update(b"\x1f%d\x1e" % y)
        return h.hexdigest()

    def subset(self, idx: np.ndarray | list[int], name: str | None = None) -> "TextSplit":
        idx = list(map(int, idx))
        return TextSplit(name or self.name, [self.texts[i] for i in idx], self.labels[idx],
                         [self.groups[i] for i in idx] if self.groups else [])


@dataclass
class ImageSplit:
    """uint8 images ([N,H,W] or [N,H,W,C]) with integer labels; ``sha256`` hashes pixels + labels.

    ``source_index`` is each image's row in the source it was taken from (e.g. Fashion-MNIST's
    60,000 train images), so disjointness between splits can be checked.
    """

    name: str
    images: np.ndarray
    labels: np.ndarray
    source_index: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.labels = np.asarray(self.labels, dtype=np.int64)
        if len(self.labels) != len(self.images):
            raise DataError("image split has a different number of labels than images",
                            where=f"split {self.name}",
                            value=f"{len(self.labels)} labels for {len(self.images)} images",
                            fix="pass one label per image")
        if self.source_index is None:
            self.source_index = np.arange(len(self.images), dtype=np.int64)
        self._sha256: str | None = None

    def __len__(self) -> int:
        return len(self.images)

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            from quantkit.data.images import images_sha256

            self._sha256 = images_sha256(self.images, self.labels)
        return self._sha256

    def subset(self, idx: np.ndarray | list[int] | range, name: str | None = None) -> "ImageSplit":
        idx = np.asarray(list(idx) if isinstance(idx, range) else idx, dtype=np.int64)
        return ImageSplit(name or self.name, self.images[idx], self.labels[idx],
                          self.source_index[idx])


@dataclass
class Splits:
    train: TextSplit | ImageSplit
    calib: TextSplit | ImageSplit
    eval: TextSplit | ImageSplit
    label_names: list[str]

    def hashes(self) -> dict[str, str]:
        return {s.name: s.sha256 for s in (self.train, self.calib, self.eval)}

    def sizes(self) -> dict[str, int]:
        return {s.name: len(s) for s in (self.train, self.calib, self.eval)}


def _column(ds, name: str, key: str):
    if name not in ds.column_names:
        raise DataError("column not found in the dataset", where=key, value=name,
                        fix=f"set {key} to one of {ds.column_names}")
    return ds[name]


def _numeric_label(v) -> bool:
    """An integer label, also as a csv reader upcasts it (1.0), or a missing one (None, NaN)."""
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return not np.isfinite(v) or float(v).is_integer()
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def to_examples(ds, cfg: DataConfig) -> tuple[list[str], np.ndarray, list[str], list[str]]:
    """(texts, labels, groups, label_names) from a datasets table, per the data config."""
    texts_raw = _column(ds, cfg.text_column, "data.text_column")
    labels_raw = _column(ds, cfg.label_column, "data.label_column")
    groups_raw = _column(ds, cfg.group_column, "data.group_column") if cfg.group_column else None
    drop = {str(v) for v in cfg.drop_values}
    texts, labels, groups, seen = [], [], [], set()
    label_names = list(cfg.label_names)
    label_map = {str(k): int(v) for k, v in cfg.label_map.items()}
    if not label_map and label_names and not all(_numeric_label(v) for v in labels_raw[:50]):
        label_map = {name: i for i, name in enumerate(label_names)}
    for i, (t, y) in enumerate(zip(texts_raw, labels_raw)):
        if isinstance(y, (float, np.floating)):  # csv readers upcast a column with a gap
            if not np.isfinite(y):
                raise DataError("label is missing or not finite (NaN / Inf)",
                                where=f"row {i} column {cfg.label_column}", value=y,
                                fix="fill in or remove that row (an empty label cell reads "
                                    "as NaN)")
            if float(y).is_integer():
                y = int(y)
        if y is None or str(y) in drop:
            continue
        if not isinstance(t, str) or not t.strip():
            continue
        if t in seen:  # de-duplicate: one snippet, one example
            continue
        seen.add(t)
        if label_map:
            if str(y) not in label_map:
                raise DataError("label value not in data.label_map", where=f"row {i}",
                                value=y, fix=f"add it to data.label_map or data.drop_values "
                                f"(known: {sorted(label_map)})")
            yi = label_map[str(y)]
        else:
            try:
                yi = int(y)
            except (TypeError, ValueError):
                raise DataError("label is not an integer and no data.label_map is set",
                                where=f"row {i} column {cfg.label_column}", value=y,
                                fix="set data.label_names=[...] or data.label_map={...}") from None
        texts.append(t)
        labels.append(yi)
        groups.append(str(groups_raw[i]) if groups_raw is not None else str(len(texts)))
    if not texts:
        raise DataError("no labeled examples left after filtering", where="data",
                        value=cfg.path or cfg.name, fix="check data.text_column, "
                        "data.label_column and data.drop_values")
    y = np.asarray(labels, dtype=np.int64)
    n_classes = max(len(label_names), int(y.max()) + 1)
    if y.min() < 0 or (label_names and y.max() >= len(label_names)):
        raise DataError("label ids outside the declared classes", where="data.label_names",
                        value=sorted(set(y.tolist())), fix=f"declare {n_classes} label names")
    if not label_names:
        label_names = [str(i) for i in range(n_classes)]
    return texts, y, groups, label_names


def split_train_eval(texts, labels, groups, *, eval_fraction: float, seed: int,
                     by_group: bool) -> tuple[np.ndarray, np.ndarray]:
    """Indices of train and eval: whole groups go to one side when ``by_group``."""
    rng = np.random.default_rng(seed)
    n = len(texts)
    if by_group:
        uniq = sorted(set(groups))
        order = rng.permutation(len(uniq))
        target = eval_fraction * n
        counts: dict[str, int] = {}
        for g in groups:
            counts[g] = counts.get(g, 0) + 1
        eval_groups, total = set(), 0
        for j in order:
            if total >= target:
                break
            eval_groups.add(uniq[j])
            total += counts[uniq[j]]
        is_eval = np.array([g in eval_groups for g in groups])
    else:
        is_eval = np.zeros(n, dtype=bool)
        is_eval[rng.permutation(n)[: int(round(eval_fraction * n))]] = True
    return np.flatnonzero(~is_eval), np.flatnonzero(is_eval)


def make_splits(texts, labels, groups, label_names, cfg: DataConfig, *, seed: int,
                eval_part: tuple | None = None) -> Splits:
    """Seeded disjoint splits. ``eval_part`` (texts, labels, groups) uses a pre-made eval set."""
    if eval_part is None:
        tr_idx, ev_idx = split_train_eval(texts, labels, groups, eval_fraction=cfg.eval_fraction,
                                          seed=seed, by_group=bool(cfg.group_column))
        full = TextSplit("all", texts, labels, groups)
        train, evals = full.subset(tr_idx, "train"), full.subset(ev_idx, "eval")
    else:
        train = TextSplit("train", texts, labels, groups)
        evals = TextSplit("eval", *eval_part)
    if cfg.eval.limit is not None:
        evals = evals.subset(range(min(cfg.eval.limit, len(evals))), "eval")
    if len(evals) == 0:
        raise DataError("the eval split is empty", where="data.eval_fraction",
                        value=cfg.eval_fraction,
                        fix=f"raise data.eval_fraction or add data ({len(texts)} examples)")
    if len(train) == 0:
        raise DataError("the train split is empty: nothing to calibrate on",
                        where="data.eval_fraction", value=cfg.eval_fraction,
                        fix=f"lower data.eval_fraction or add data ({len(texts)} examples)")
    n_cal = cfg.calib.num_samples
    if n_cal > len(train):
        raise DataError("more calibration samples requested than the train split has",
                        where="data.calib.num_samples", value=n_cal,
                        fix=f"use at most {len(train)}")
    rng = np.random.default_rng(seed + 1)
    cal_idx = np.sort(rng.choice(len(train), size=n_cal, replace=False))
    calib = train.subset(cal_idx, "calib")
    if set(train.groups) & set(evals.groups) and cfg.group_column:
        raise DataError("a group is in both train and eval", where="data.group_column",
                        value=cfg.group_column, fix="report this as a bug")
    log.info("splits: train %d, calib %d (from train), eval %d", len(train), len(calib), len(evals))
    return Splits(train=train, calib=calib, eval=evals, label_names=list(label_names))


def make_image_splits(train_images: np.ndarray, train_labels: np.ndarray,
                      label_names: list[str], cfg: DataConfig, *, seed: int,
                      eval_part: tuple[np.ndarray, np.ndarray] | None = None,
                      n_train: int | None = None) -> Splits:
    """Seeded disjoint image splits: train (what a head is fitted on), calib, eval.

    ``eval_part`` (images, labels) is a pre-made eval set (Fashion-MNIST's 10,000 test
    images); without it ``cfg.eval_fraction`` of the images go to eval. ``n_train`` keeps a
    seeded subset of the remaining train images as the train split; calibration images are
    then drawn from the rest, so they are disjoint from what the head was fitted on. Without
    that rest (or when it is too small) they come from train, as for text.
    """
    source = ImageSplit("all", train_images, train_labels)
    if eval_part is None:
        is_eval = np.zeros(len(source), dtype=bool)
        rng = np.random.default_rng(seed)
        is_eval[rng.permutation(len(source))[: int(round(cfg.eval_fraction * len(source)))]] = True
        pool, evals = source.subset(np.flatnonzero(~is_eval), "train"), \
            source.subset(np.flatnonzero(is_eval), "eval")
    else:
        pool, evals = ImageSplit("train", train_images, train_labels), ImageSplit("eval", *eval_part)
    if cfg.eval.limit is not None:
        evals = evals.subset(range(min(cfg.eval.limit, len(evals))), "eval")
    if len(evals) == 0:
        raise DataError("the eval split is empty", where="data.eval", value=0,
                        fix="lower data.eval_fraction's complement, or add images")
    if n_train is not None and n_train < 1:
        raise DataError("model.head.n_train must be positive", where="model.head.n_train",
                        value=n_train, fix="use null (every train image) or a positive count")
    if n_train is not None and n_train < len(pool):
        pick = np.zeros(len(pool), dtype=bool)
        pick[np.random.default_rng(seed + 2).choice(len(pool), size=n_train, replace=False)] = True
        train, rest = pool.subset(np.flatnonzero(pick), "train"), pool.subset(np.flatnonzero(~pick))
    else:
        train, rest = ImageSplit("train", pool.images, pool.labels, pool.source_index), None
    n_cal = cfg.calib.num_samples
    if rest is not None and n_cal <= len(rest):
        calib_from, where = rest, "train images the head was not fitted on"
    else:
        calib_from, where = train, "the train split"
    if n_cal > len(calib_from):
        raise DataError("more calibration samples requested than the train split has",
                        where="data.calib.num_samples", value=n_cal,
                        fix=f"use at most {len(calib_from)}")
    cal_idx = np.sort(np.random.default_rng(seed + 1).choice(len(calib_from), size=n_cal,
                                                             replace=False))
    calib = calib_from.subset(cal_idx, "calib")
    log.info("image splits: train %d, calib %d (from %s), eval %d", len(train), len(calib),
             where, len(evals))
    return Splits(train=train, calib=calib, eval=evals, label_names=list(label_names))
