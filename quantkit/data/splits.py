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
class Splits:
    train: TextSplit
    calib: TextSplit
    eval: TextSplit
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


def to_examples(ds, cfg: DataConfig) -> tuple[list[str], np.ndarray, list[str], list[str]]:
    """(texts, labels, groups, label_names) from a datasets table, per the data config."""
    texts_raw = _column(ds, cfg.text_column, "data.text_column")
    labels_raw = _column(ds, cfg.label_column, "data.label_column")
    groups_raw = _column(ds, cfg.group_column, "data.group_column") if cfg.group_column else None
    drop = {str(v) for v in cfg.drop_values}
    texts, labels, groups, seen = [], [], [], set()
    label_names = list(cfg.label_names)
    label_map = {str(k): int(v) for k, v in cfg.label_map.items()}
    if not label_map and label_names and not all(isinstance(v, (int, np.integer)) for v in labels_raw[:50]):
        label_map = {name: i for i, name in enumerate(label_names)}
    for i, (t, y) in enumerate(zip(texts_raw, labels_raw)):
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
        raise DataError("the eval split is empty", where="data.eval", value=0,
                        fix="lower data.eval_fraction's complement, or add data")
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
