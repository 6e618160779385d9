"""Provenance sections of the record: the data and its load (``record.data``; the model is
quantkit.models.model.Model itself), each stage's timing, the stage cache's counts, where a
sweep job ran (``record.job``)."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.data.info import DataInfo
from quantkit.record.serde import JsonObject, encode, optional, to_dict_codec

__all__ = ["CacheCount", "DataRecord", "JobRecord", "StageTiming"]


# data/info.py's DataInfo; ``grouped`` is written for the reader (group_column is set)
to_dict_codec(DataInfo, derived={"grouped": bool})


@dataclass
class DataRecord:
    """``record.data``: the dataset, each split's size and sha256, the label names and what
    the load did; ``kind`` / ``feeds`` for image data."""

    name: str
    source: str
    sizes: dict[str, int]
    sha256: dict[str, str]
    label_names: list[str]
    label_free: bool | None = optional()  # schema 2 on
    info: DataInfo | None = optional()
    kind: str | None = optional()  # not text
    feeds: JsonObject | None = optional()  # not text: the preprocessing (data/feeds.py)

    def splits(self) -> list[tuple[str, int | None, str | None]]:
        """(split, size, sha256) of every split with a size or a hash (None: not recorded)."""
        return [(s, self.sizes.get(s), self.sha256.get(s))
                for s in dict.fromkeys([*self.sizes, *self.sha256])]


@dataclass(kw_only=True)
class StageTiming:
    """One stage of ``record.stages``: what the stage noted (``cached``, counts, the
    recipe...), its seconds and the process's peak RSS after it."""

    cached: bool | None = optional()
    fp32_nodes: int | None = optional()
    recipe: str | None = optional()
    rewritten: bool | None = optional()
    tensors: int | None = optional()
    samples: int | None = optional()
    collect_seconds: float | None = optional()
    loaded: int | None = optional()
    count: int | None = optional()
    candidates: int | None = optional()
    examples: int | None = optional()
    full_evals: int | None = optional()
    bound: int | None = optional()
    family: list[str] | None = optional()
    seconds: float
    peak_rss_gb: float | None = optional()  # schema 2 on

    def noted(self) -> list[tuple[str, object]]:
        """(name, value) of what the stage noted besides its seconds, in record order."""
        out = encode(self)
        assert isinstance(out, dict)
        return [(k, getattr(self, k)) for k in out if k != "seconds"]


@dataclass
class CacheCount:
    """A stage's stage-cache hits and misses."""

    hits: int
    misses: int


@dataclass
class JobRecord:
    """``record.job``: the launcher, the worker host and pid, the attempt (run/job.py)."""

    launcher: str | None
    worker_host: str
    pid: int
    attempt: int | None
    earlier_finished: bool
