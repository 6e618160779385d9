"""Provenance of the record: the model, the data splits, the run's stages, the parts of the
config the report reads, where a sweep job ran (``record.job``, ``record.stage_cache``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, view_field, view_to_dict

__all__ = ["CacheCount", "ConfigView", "DataInfo", "JobInfo", "ModelInfo", "StageTiming"]

#: The model facts shown as rows, when recorded, in this order.
MODEL_FACTS = ("source", "path", "sha256", "opset", "input_names", "output_name", "tokenizer")


@dataclass(frozen=True)
class ModelInfo:
    """``record.model``; ``facts`` keeps the recorded subset of MODEL_FACTS in that order."""

    facts: dict[str, Any] = view_field(factory=dict)
    label_names: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> ModelInfo:
        d = mapping(d)
        return cls(facts={k: d[k] for k in MODEL_FACTS if k in d}, label_names=d.get("label_names"))

    @property
    def path(self) -> Any:
        return self.facts["path"] if "path" in self.facts else None

    @property
    def sha256(self) -> Any:
        return self.facts["sha256"] if "sha256" in self.facts else None

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class DataInfo:
    """``record.data``: the dataset, each split's size and sha256, the label names."""

    name: Any = None
    source: Any = None
    sizes: dict[str, Any] = field(default_factory=dict)
    sha256: dict[str, Any] = field(default_factory=dict)
    label_names: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> DataInfo:
        d = mapping(d)
        return cls(name=d.get("name"), source=d.get("source"), sizes=dict(d.get("sizes") or {}),
                   sha256=dict(d.get("sha256") or {}), label_names=d.get("label_names"))

    def splits(self) -> list[tuple[str, Any, Any]]:
        """(split, size, sha256) of every split with a size or a hash (None when not recorded)."""
        return [(s, self.sizes.get(s), self.sha256.get(s))
                for s in dict.fromkeys([*self.sizes, *self.sha256])]

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class StageTiming:
    """One stage's seconds and its other recorded facts (cached, ...)."""

    seconds: Any = None
    extra: dict[str, Any] = view_field(factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> StageTiming:
        d = mapping(d)
        return cls(seconds=d.get("seconds"), extra={k: v for k, v in d.items() if k != "seconds"})

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class ConfigView:
    """The parts of the recorded config the report shows: the reviewer, the verdict and
    compare groups (as recorded)."""

    reviewer: Any = view_field("report", "reviewer", default="")
    verdict: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> ConfigView:
        d = mapping(d)
        return cls(reviewer=mapping(d.get("report")).get("reviewer") or "",
                   verdict=mapping(d.get("verdict")), compare=mapping(d.get("compare")))

    @property
    def margin_kind(self) -> Any:
        return self.verdict.get("margin_kind") or ""

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class JobInfo(FlatView):
    """``record.job``: the launcher, the worker host, the attempt."""

    launcher: Any = None
    worker_host: Any = None
    attempt: Any = None
    earlier_finished: Any = None


@dataclass(frozen=True)
class CacheCount:
    """A stage's stage-cache hits and misses."""

    hits: int = 0
    misses: int = 0

    @classmethod
    def from_dict(cls, d: Any) -> CacheCount:
        d = mapping(d)
        return cls(hits=int(d.get("hits", 0)), misses=int(d.get("misses", 0)))

    @staticmethod
    def per_stage(d: Any) -> dict[str, CacheCount]:
        return {str(s): CacheCount.from_dict(c) for s, c in mapping(d).items()
                if isinstance(c, Mapping)}

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)
