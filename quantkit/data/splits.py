"""Seeded train / calib / dev / test splits, disjoint by group, each hashed.

- **test**: what the sign-off is evaluated on, once per candidate (``data.test_fraction``
  of the examples, or the source's own test set: Fashion-MNIST's 10,000 test images, a hub
  dataset's ``data.eval_split``);
- **dev**: what every choice is made on (``data.dev.size`` examples, or
  ``data.dev_fraction``, or null: whatever is left after the others);
- **calib**: ``data.calib.num_samples`` examples for the calibration ranges, exactly. For a
  ready ONNX model (``calib_fits_data``: no head is fitted on train) a smaller dataset
  calibrates on every example test and dev leave (at least ``data.calib.min_samples``), with
  the named warning ``calib_smaller_than_requested``: calibration follows the data. A zoo or
  hub model's head needs the train split, so there a request beyond the data is refused;
- **train**: what a zoo / hub head is fitted on (``data.train.size``, or image zoo models'
  ``model.head.n_train``; null: all that is left).

Groups (``data.group_column``: a movie for Rotten Tomatoes; each example alone without
one) are whole in one split: the splits are carved from one seeded permutation of the
groups (:func:`quantkit.data.partition.partition_groups`). Each split keeps every
example's group (``split.groups``) so the verdict can resample groups (cluster bootstrap).
``data.dev.limit`` / ``data.test.limit`` then keep a seeded subsample stratified by label.

``Splits.eval`` is a read-only alias of ``Splits.test``: the run built before the dev /
test protocol reads ``splits.eval``; it is to go once every stage reads dev or test.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

import numpy as np

from quantkit.data.identity import image_array_id, text_ids
from quantkit.data.info import DataInfo
from quantkit.data.partition import (Part, group_codes, partition_groups, random_subsample,
                                     stratified_subsample)
from quantkit.errors import ConfigError, DataError
from quantkit.settings import DataConfig, resolve_test_fraction, resolve_test_limit

log = logging.getLogger(__name__)

__all__ = ["TextSplit", "ImageSplit", "Splits", "SPLIT_NAMES", "make_splits"]

SPLIT_NAMES = ("train", "calib", "dev", "test")


def _labels(labels) -> np.ndarray | None:
    return None if labels is None else np.asarray(labels, dtype=np.int64)


@dataclass
class TextSplit:
    """Texts with integer labels (None: label-free) and one group per text.

    ``sha256`` hashes texts + labels (texts only, marked, when label-free).
    """

    name: str
    texts: list[str]
    labels: np.ndarray | None
    groups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = _labels(self.labels)
        if self.labels is not None and len(self.labels) != len(self.texts):
            raise DataError("text split has a different number of labels than texts",
                            where=f"split {self.name}",
                            value=f"{len(self.labels)} labels for {len(self.texts)} texts",
                            fix="pass one label per text")
        if not self.groups:
            self.groups = [f"{self.name}{i}" for i in range(len(self.texts))]

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def label_free(self) -> bool:
        return self.labels is None

    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        if self.labels is None:
            h.update(b"label-free\x1e")
            for t in self.texts:
                h.update(t.encode("utf-8"))
                h.update(b"\x1e")
            return h.hexdigest()
        for t, y in zip(self.texts, self.labels.tolist()):
            h.update(t.encode("utf-8"))
            h.update(b"\x1f%d\x1e" % y)
        return h.hexdigest()

    def group_ids(self) -> np.ndarray:
        """Dense int64 group codes (0..G-1) per example: what a cluster bootstrap resamples."""
        return group_codes(self.groups)

    def example_ids(self) -> list[bytes]:
        """Each text's identity for the test ledger (quantkit.data.identity), in order."""
        return text_ids(self.texts)

    def subset(self, idx, name: str | None = None) -> "TextSplit":
        idx = list(map(int, idx))
        return TextSplit(name or self.name, [self.texts[i] for i in idx],
                         None if self.labels is None else self.labels[idx],
                         [self.groups[i] for i in idx])


@dataclass
class ImageSplit:
    """uint8 images ([N,H,W] or [N,H,W,C]) with integer labels (None: label-free).

    ``source_index`` is each image's row in the source it came from (e.g. Fashion-MNIST's
    60,000 train images) and ``groups`` its group (default: source name + row, each image
    alone), so disjointness between splits can be checked. ``sha256`` hashes pixels +
    labels. ``source_ids``: each image's identity for the test ledger, taken from its source
    before any resize (:mod:`quantkit.data.identity`: a file's bytes); None where the pixels
    are the source's own (decoded at source size): then they are the identity.
    """

    name: str
    images: np.ndarray
    labels: np.ndarray | None
    source_index: np.ndarray | None = None
    groups: np.ndarray | None = None
    source_ids: list[bytes] | None = None

    def __post_init__(self) -> None:
        self.labels = _labels(self.labels)
        if self.labels is not None and len(self.labels) != len(self.images):
            raise DataError("image split has a different number of labels than images",
                            where=f"split {self.name}",
                            value=f"{len(self.labels)} labels for {len(self.images)} images",
                            fix="pass one label per image")
        if self.source_index is None:
            self.source_index = np.arange(len(self.images), dtype=np.int64)
        if self.groups is None:
            self.groups = np.array([f"{self.name}{i}" for i in self.source_index.tolist()],
                                   dtype=object)
        if self.source_ids is not None and len(self.source_ids) != len(self.images):
            raise DataError("image split has a different number of source ids than images",
                            where=f"split {self.name}", value=len(self.source_ids),
                            fix="pass one source id per image (quantkit.data.identity)")
        self._sha256: str | None = None

    def __len__(self) -> int:
        return len(self.images)

    @property
    def label_free(self) -> bool:
        return self.labels is None

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            from quantkit.data.images import images_sha256

            self._sha256 = images_sha256(self.images, self.labels)
        return self._sha256

    def group_ids(self) -> np.ndarray:
        return group_codes(self.groups)

    def subset(self, idx, name: str | None = None) -> "ImageSplit":
        idx = np.asarray(list(idx) if isinstance(idx, range) else idx, dtype=np.int64)
        return ImageSplit(name or self.name, self.images[idx],
                          None if self.labels is None else self.labels[idx],
                          self.source_index[idx], self.groups[idx],
                          None if self.source_ids is None
                          else [self.source_ids[i] for i in idx.tolist()])

    def example_ids(self) -> list[bytes]:
        """Each image's identity for the test ledger (quantkit.data.identity), in order."""
        if self.source_ids is not None:
            return list(self.source_ids)
        return [image_array_id(x) for x in np.asarray(self.images)]


Split = TextSplit | ImageSplit


@dataclass
class Splits:
    """The four splits, the class names and what loading did (``info``).

    ``eval`` is a read-only alias of ``test`` for the run built before dev / test existed.
    """

    train: Split
    calib: Split
    dev: Split
    test: Split
    label_names: list[str]
    info: DataInfo = field(default_factory=DataInfo)

    @property
    def eval(self) -> Split:
        """Deprecated: the test split (read-only)."""
        return self.test

    @property
    def label_free(self) -> bool:
        return self.info.label_free

    def named(self) -> dict[str, Split]:
        return {n: getattr(self, n) for n in SPLIT_NAMES}

    def hashes(self) -> dict[str, str]:
        return {n: s.sha256 for n, s in self.named().items()}

    def sizes(self) -> dict[str, int]:
        return {n: len(s) for n, s in self.named().items()}

    def to_dict(self) -> dict:
        """JSON-ready: sizes, hashes, groups per split, label names and info."""
        return {"sizes": self.sizes(), "sha256": self.hashes(),
                "groups": {n: len(set(map(str, s.groups))) for n, s in self.named().items()},
                "label_names": list(self.label_names), "label_free": self.label_free,
                "info": self.info.to_dict()}


# --------------------------------------------------------------------------- building


def _rng(seed: int, stream: int) -> np.random.Generator:
    """One independent generator per purpose (partition, dev limit, test limit)."""
    return np.random.default_rng([seed, stream])


def _dev_part(cfg: DataConfig, n: int) -> tuple[Part | None, str]:
    """The dev part when it has a fixed size (else None: dev is what is left)."""
    if cfg.dev.size is not None:
        return Part("dev", cfg.dev.size), "data.dev.size"
    if cfg.dev_fraction is not None:
        return Part("dev", int(round(cfg.dev_fraction * n))), "data.dev_fraction"
    return None, "data.dev_fraction"


def _apply_limit(split: Split, limit: int | None, key: str, rng: np.random.Generator,
                 info: DataInfo) -> Split:
    if limit is None or limit >= len(split):
        return split
    if split.labels is None:
        idx = random_subsample(len(split), limit, rng)
    else:
        idx = stratified_subsample(split.labels, limit, rng)
    info.limits[split.name] = {"key": key, "before": len(split), "after": int(len(idx)),
                               "stratified": split.labels is not None}
    log.info("%s=%d: seeded %s subsample of the %s split (%d -> %d)", key, limit,
             "stratified" if split.labels is not None else "random", split.name, len(split),
             len(idx))
    return split.subset(idx, split.name)


def make_splits(full: Split, label_names: list[str], cfg: DataConfig, *, seed: int,
                info: DataInfo | None = None, test_part: Split | None = None,
                train_size: int | None = None, train_key: str = "data.train.size",
                calib_fits_data: bool = False) -> Splits:
    """Seeded, group-disjoint splits of ``full`` (see the module docstring).

    ``test_part`` is a pre-made test split (its examples are not in ``full``); pool
    examples whose text also appears in it are dropped and counted. ``train_size``
    overrides ``data.train.size`` (image zoo models pass ``model.head.n_train``).
    ``calib_fits_data``: calibrate on what is left when the data holds fewer than
    ``data.calib.num_samples`` (a model with no head to fit on train), else refuse.
    """
    from quantkit.data.checks import check_calibration_size, check_classes

    info = info or DataInfo()
    if test_part is not None:
        full = _drop_overlap(full, test_part, info, grouped=cfg.group_column is not None)
    n = len(full)
    test_key, test_fraction = resolve_test_fraction(cfg)
    train_size = cfg.train.size if train_size is None else train_size
    n_cal = cfg.calib.num_samples
    parts: list[Part] = []
    if test_part is None:
        parts.append(Part("test", int(round(test_fraction * n))))
    dev_fixed, dev_key = _dev_part(cfg, n)
    if dev_fixed is not None:
        parts.append(dev_fixed)
    parts += [Part("calib", n_cal, exact=True), Part("train", train_size, exact=True)]
    if dev_fixed is None:
        parts.append(Part("dev", None))
    idx, unused = partition_groups(full.group_ids(), parts, _rng(seed, 0))
    test = test_part if test_part is not None else full.subset(idx["test"], "test")
    if test_part is not None:
        test.name = "test"
    if len(test) == 0:
        raise DataError("the test split is empty", where=test_key, value=test_fraction,
                        fix=f"raise {test_key} or add data ({n} examples)")
    pool = n - len(idx.get("test", ())) - (len(idx["dev"]) if dev_fixed is not None else 0)
    if pool <= 0:
        raise DataError("the train split is empty: nothing left to calibrate on",
                        where=test_key, value=test_fraction,
                        fix=f"lower {test_key} (or {dev_key}) or add data ({n} examples)")
    n_calib = len(idx["calib"])
    if n_calib < n_cal:
        if not calib_fits_data:
            raise DataError("more calibration samples requested than the data left after the "
                            "test and dev splits has", where="data.calib.num_samples",
                            value=n_cal, fix=f"use at most {pool}, or lower {test_key} / {dev_key}")
        info.warn("calib_smaller_than_requested",
                  f"data.calib.num_samples={n_cal} but only {n_calib} examples were left after "
                  f"the test and dev splits: calibrating on {n_calib} (lower {test_key} / "
                  f"{dev_key} or add data for more)")
    check_calibration_size(n_calib, cfg, info)
    if len(idx["dev"]) == 0:
        raise DataError("the dev split is empty: nothing to make choices on", where=dev_key,
                        value=cfg.dev.size or cfg.dev_fraction,
                        fix=("set data.dev_fraction=0.2 or data.dev.size=<examples>"
                             if dev_fixed is None else f"raise {dev_key} or add data ({n} examples)"))
    if train_size is not None and len(idx["train"]) < train_size:
        info.warn("train_smaller_than_requested", f"{train_key}={train_size} but only "
                  f"{len(idx['train'])} examples were left for train")
    info.unused += int(len(unused))
    train = full.subset(idx["train"], "train")
    calib = full.subset(idx["calib"], "calib")
    dev = full.subset(idx["dev"], "dev")
    limit_key, test_limit = resolve_test_limit(cfg)
    dev = _apply_limit(dev, cfg.dev.limit, "data.dev.limit", _rng(seed, 1), info)
    test = _apply_limit(test, test_limit, limit_key, _rng(seed, 2), info)
    splits = Splits(train=train, calib=calib, dev=dev, test=test,
                    label_names=list(label_names), info=info)
    _check_disjoint(splits, cfg)
    check_classes(splits, cfg)
    log.info("splits: %s (disjoint by %s; %d examples unused)",
             ", ".join(f"{k} {v}" for k, v in splits.sizes().items()),
             cfg.group_column or "example", info.unused)
    return splits


def _drop_overlap(pool: Split, test: Split, info: DataInfo, *, grouped: bool) -> Split:
    """``pool`` without the examples that would leak into a pre-made test split: texts that
    are also in it, and (with a group column) examples of a group it holds."""
    keep = np.ones(len(pool), dtype=bool)
    if isinstance(pool, TextSplit) and isinstance(test, TextSplit):
        seen = set(test.texts)
        same_text = np.array([t in seen for t in pool.texts], dtype=bool)
        if same_text.any():
            info.duplicates_dropped += int(same_text.sum())
            info.warn("duplicates_dropped", f"{int(same_text.sum())} texts of the train data "
                      "also in the test split were dropped from train")
        keep &= ~same_text
    if grouped:
        test_groups = set(map(str, test.groups))
        same_group = np.array([str(g) in test_groups for g in pool.groups], dtype=bool) & keep
        if same_group.any():
            info.unused += int(same_group.sum())
            log.info("%d train examples share a group with the test split: not used",
                     int(same_group.sum()))
        keep &= ~same_group
    return pool if keep.all() else pool.subset(np.flatnonzero(keep), pool.name)


def _check_disjoint(splits: Splits, cfg: DataConfig) -> None:
    named = splits.named()
    seen: dict[str, str] = {}
    for name, s in named.items():
        for g in set(map(str, s.groups)):
            if g in seen and seen[g] != name:
                raise DataError(f"a group is in both the {seen[g]} and the {name} split",
                                where="data.group_column", value=g, fix="report this as a bug")
            seen[g] = name


def require_labels(splits: Splits, what: str) -> None:
    """ConfigError when ``what`` needs labels and the data is label-free."""
    if splits.label_free:
        raise ConfigError(f"{what} needs labels and the data is label-free",
                          where="data.label_column", value=None,
                          fix="set data.label_column to the label column, or use a "
                              "label-free metric (agreement with FP32)")
