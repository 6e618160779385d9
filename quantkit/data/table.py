"""A text table (a ``datasets.Dataset``) -> examples: texts, labels or none, groups, counts.

Rules, each counted in :class:`~quantkit.data.info.DataInfo` and never silent:
- a missing label (empty cell, None, NaN, Inf) is an error naming every such row and the
  first few values;
- a label listed in ``data.drop_values`` drops its row (counted);
- an empty text drops its row (counted, warned);
- a repeated text keeps its first row (counted, warned; conflicting labels counted too).
With ``data.label_column=null`` the data is label-free: labels are None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from quantkit.data.info import DataInfo
from quantkit.errors import DataError, Phrase
from quantkit.settings import DataConfig

__all__ = ["TextExamples", "to_examples", "rows_phrase", "values_phrase"]

_SHOW_ROWS = 20  # row numbers listed in one error line
_SHOW_VALUES = 5  # (value, row) pairs listed in one error line
# what counts as a missing label, and how a csv file's cells read (datasets / pandas)
_MISSING_HOW = "null, NaN, Inf or blank; a csv reader reads an empty cell, NA or NaN as null"


@dataclass
class TextExamples:
    texts: list[str]
    labels: np.ndarray | None  # int64 class ids; None: label-free
    groups: list[str]
    label_names: list[str]
    info: DataInfo = field(default_factory=DataInfo)


def _column(ds, name: str, key: str, extra_fix: str = ""):
    if name not in ds.column_names:
        raise DataError("column not found in the dataset", where=key, value=name,
                        fix=f"set {key} to one of {ds.column_names}{extra_fix}")
    return ds[name]


def _numeric_label(v) -> bool:
    """An integer label, also as a csv reader upcasts it (1.0), or a missing one (None, NaN)."""
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return not np.isfinite(v) or float(v).is_integer()
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _missing(y) -> bool:
    if y is None:
        return True
    if isinstance(y, (float, np.floating)):
        return not np.isfinite(y)
    return isinstance(y, str) and not y.strip()


def rows_phrase(rows: list[int]) -> str:
    """'row 9' or 'rows 3, 17, 42 (+5 more)': 0-based data rows (the header is not a row)."""
    if len(rows) == 1:
        return f"row {rows[0]}"
    shown = ", ".join(str(r) for r in rows[:_SHOW_ROWS])
    more = f" (+{len(rows) - _SHOW_ROWS} more)" if len(rows) > _SHOW_ROWS else ""
    return f"rows {shown}{more}"


def _shown(value) -> str:
    """A cell as an error shows it: null (None), nan, inf, -inf, '' or repr()."""
    if value is None:
        return "null"
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return repr(value)


def values_phrase(found: list[tuple[int, object]]) -> Phrase:
    """'null at row 3, inf at row 40 (+7 more)': the first (row, value) pairs of an error."""
    shown = ", ".join(f"{_shown(v)} at row {r}" for r, v in found[:_SHOW_VALUES])
    more = f" (+{len(found) - _SHOW_VALUES} more)" if len(found) > _SHOW_VALUES else ""
    return Phrase(shown + more)


def _check_missing_labels(labels_raw, cfg: DataConfig, drop: set[str]) -> None:
    bad = [i for i, y in enumerate(labels_raw) if _missing(y) and str(y) not in drop]
    if not bad:
        return
    one = len(bad) == 1
    raise DataError(f"{len(bad)} label{'' if one else 's'} missing or not finite "
                    f"({_MISSING_HOW})",
                    where=f"{rows_phrase(bad)} (0-based data rows) column {cfg.label_column}",
                    value=values_phrase([(i, labels_raw[i]) for i in bad]),
                    fix=f"fill in or remove {'that row' if one else 'those rows'}, or set "
                        "data.label_column=null for a label-free run")


def _label_map(cfg: DataConfig, labels_raw) -> dict[str, int]:
    label_map = {str(k): int(v) for k, v in cfg.label_map.items()}
    if not label_map and cfg.label_names and not all(_numeric_label(v) for v in labels_raw[:50]):
        label_map = {name: i for i, name in enumerate(cfg.label_names)}
    return label_map


def _class_id(y, i: int, cfg: DataConfig, label_map: dict[str, int]) -> int:
    if isinstance(y, (float, np.floating)) and float(y).is_integer():
        y = int(y)  # csv readers upcast an int column with a gap to float
    if label_map:
        if str(y) not in label_map:
            raise DataError("label value not in data.label_map", where=f"row {i}", value=y,
                            fix=f"add it to data.label_map or data.drop_values "
                                f"(known: {sorted(label_map)})")
        return label_map[str(y)]
    try:
        if isinstance(y, (float, np.floating)):
            raise ValueError
        return int(y)
    except (TypeError, ValueError):
        raise DataError("label is not an integer and no data.label_map is set",
                        where=f"row {i} column {cfg.label_column}", value=y,
                        fix="set data.label_names=[...] or data.label_map={...}") from None


def to_examples(ds, cfg: DataConfig) -> TextExamples:
    """Examples from a datasets table, per the data config (see the module rules)."""
    label_free = cfg.label_column is None
    texts_raw = _column(ds, cfg.text_column, "data.text_column")
    labels_raw = None if label_free else _column(
        ds, cfg.label_column, "data.label_column",
        ", or data.label_column=null for label-free data")
    groups_raw = _column(ds, cfg.group_column, "data.group_column") if cfg.group_column else None
    info = DataInfo(kind="text", label_free=label_free, group_column=cfg.group_column,
                    rows_read=len(texts_raw))
    drop = {str(v) for v in cfg.drop_values}
    if labels_raw is not None:
        _check_missing_labels(labels_raw, cfg, drop)
        label_map = _label_map(cfg, labels_raw)
    texts: list[str] = []
    labels: list[int] = []
    groups: list[str] = []
    first_label: dict[str, int | None] = {}
    for i, t in enumerate(texts_raw):
        yi = None
        if labels_raw is not None:
            y = labels_raw[i]
            if str(y) in drop:
                info.dropped_by_value += 1
                continue
            yi = _class_id(y, i, cfg, label_map)
        if not isinstance(t, str) or not t.strip():
            info.empty_texts_dropped += 1
            continue
        if t in first_label:  # one snippet, one example
            info.duplicates_dropped += 1
            info.duplicate_label_conflicts += int(first_label[t] != yi)
            continue
        first_label[t] = yi
        texts.append(t)
        if yi is not None:
            labels.append(yi)
        groups.append(str(groups_raw[i]) if groups_raw is not None else f"row{i}")
    if not texts:
        raise DataError("no labeled examples left after filtering" if not label_free else
                        "no examples left after filtering", where="data",
                        value=cfg.path or cfg.name, fix="check data.text_column, "
                        "data.label_column and data.drop_values")
    _count_warnings(info, cfg)
    if label_free:
        return TextExamples(texts, None, groups, list(cfg.label_names), info)
    y = np.asarray(labels, dtype=np.int64)
    names = check_label_ids(y, list(cfg.label_names))
    return TextExamples(texts, y, groups, names, info)


def check_label_ids(y: np.ndarray, label_names: list[str]) -> list[str]:
    """The label names for class ids ``y`` (default "0".."K-1"); DataError if ids fall
    outside the declared classes."""
    n_classes = max(len(label_names), int(y.max()) + 1)
    if y.min() < 0 or (label_names and y.max() >= len(label_names)):
        raise DataError("label ids outside the declared classes", where="data.label_names",
                        value=sorted(set(y.tolist()))[:12], fix=f"declare {n_classes} label names")
    return label_names or [str(i) for i in range(n_classes)]


def _count_warnings(info: DataInfo, cfg: DataConfig) -> None:
    where = cfg.path or cfg.name
    if info.empty_texts_dropped:
        info.warn("empty_texts_dropped", f"{info.empty_texts_dropped} rows with an empty "
                  f"{cfg.text_column} cell dropped from {where}")
    if info.duplicates_dropped:
        info.warn("duplicates_dropped", f"{info.duplicates_dropped} repeated texts dropped from "
                  f"{where} (the first row of each kept)")
    if info.duplicate_label_conflicts:
        info.warn("duplicate_label_conflicts", f"{info.duplicate_label_conflicts} repeated "
                  f"texts in {where} had a different label than their first row")
