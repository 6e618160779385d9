"""What loading and splitting did to the data: counts for the record and named warnings.

Nothing is dropped, subsampled or truncated silently: every such step adds a count here,
and every condition a reviewer should know about (a small calibration set, a class missing
from the test split, truncated texts) is a :class:`DataWarning` with a stable ``code``,
logged once and kept for the record and the run summary.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)

__all__ = ["DataWarning", "DataInfo", "WARNING_CODES"]

#: every warning code the data stage can emit, with what it means
WARNING_CODES = {
    "calib_small": "fewer calibration examples than data.calib.warn_below: ranges may be unstable",
    "calib_smaller_than_requested": "the data left after test and dev held fewer examples than "
                                    "data.calib.num_samples: calibrated on all of them",
    "classes_missing": "a class of data.label_names has no example in a split",
    "duplicates_dropped": "repeated texts were dropped (one text, one example)",
    "duplicate_label_conflicts": "a repeated text had different labels; the first was kept",
    "empty_texts_dropped": "rows with an empty text cell were dropped",
    "texts_truncated": "texts longer than data.max_length tokens were truncated",
    "train_smaller_than_requested": "fewer examples were left for train than data.train.size",
    "label_free": "the data has no labels: only label-free metrics (agreement with FP32) apply",
}


@dataclass(frozen=True)
class DataWarning:
    code: str  # a key of WARNING_CODES
    message: str  # one line: what, where, the value and what to do

    def __post_init__(self) -> None:
        if self.code not in WARNING_CODES:
            raise ValueError(f"unknown data warning code {self.code!r}")


@dataclass
class DataInfo:
    """Counts and warnings of one data load, JSON-ready with :meth:`to_dict`."""

    kind: str = "text"  # text | image
    label_free: bool = False  # True: every split's labels are None
    group_column: str | None = None  # the column splits are disjoint by (None: examples)
    rows_read: int = 0  # rows / images in the source(s), before any filtering
    dropped_by_value: int = 0  # rows whose label is in data.drop_values
    empty_texts_dropped: int = 0
    duplicates_dropped: int = 0  # repeated texts (within the data, and pool texts in test)
    duplicate_label_conflicts: int = 0  # of those, repeats whose label differed
    unused: int = 0  # examples in no split (trimmed groups, beyond data.train.size)
    limits: dict[str, dict] = field(default_factory=dict)  # split -> {key, before, after}
    max_length: int | None = None  # text: the token limit truncation counts refer to
    truncated: dict[str, int] = field(default_factory=dict)  # split -> texts truncated
    warnings: list[DataWarning] = field(default_factory=list)

    @property
    def grouped(self) -> bool:
        return self.group_column is not None

    def warn(self, code: str, message: str) -> None:
        """Keep and log a named warning (once per code and message)."""
        w = DataWarning(code, message)
        if w not in self.warnings:
            self.warnings.append(w)
            log.warning("data warning %s: %s", code, message)

    def warning_codes(self) -> list[str]:
        return [w.code for w in self.warnings]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["grouped"] = self.grouped
        return d
