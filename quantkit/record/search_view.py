"""The precision search of the record (``record.search``): its summary, every evaluation,
the Pareto front, the proxy ranking, the FP16 set found."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import mapping, seq, view_field, view_to_dict
from quantkit.record.verdict_entry import VerdictEntry

__all__ = ["SEARCH_LISTS", "SearchEval", "SearchView"]

#: The search's list-valued keys; every other key is a summary field.
SEARCH_LISTS = ("evaluations", "pareto", "found", "fp16_nodes", "pruned", "ranking", "proxy")


def _finite(x: Any) -> bool:
    import math

    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class SearchEval:
    """One evaluated FP16 set (or a Pareto point): its size, metric, interval, status."""

    index: Any = None
    phase: Any = None
    k: Any = None
    status: Any = None
    interval: Any = None
    seconds: Any = None
    fp16_set: Any = None
    fp16_count: Any = None
    metric: Any = None
    verdict: VerdictEntry | None = view_field("extra", "verdict")

    @classmethod
    def from_dict(cls, d: Any, index: Any = None) -> SearchEval:
        d = mapping(d)
        return cls(index=d.get("index", index), phase=d.get("phase"), k=d.get("k"),
                   status=d.get("status"), interval=d.get("interval"), seconds=d.get("seconds"),
                   fp16_set=d.get("fp16_set"), fp16_count=d.get("fp16_count"),
                   metric=d.get("metric"),
                   verdict=VerdictEntry.parse(mapping(d.get("extra")).get("verdict")))

    @property
    def count(self) -> Any:
        """FP16 node count: ``fp16_count``, else len(fp16_set), else k."""
        if _finite(self.fp16_count):
            return self.fp16_count
        if isinstance(self.fp16_set, Sequence) and not isinstance(self.fp16_set, str):
            return len(self.fp16_set)
        return self.k

    @property
    def value(self) -> Any:
        """The metric's value (``metric``, or ``metric.value``)."""
        m = self.metric
        return mapping(m).get("value") if isinstance(m, Mapping) else m

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The interval as (low, high) when both ends are finite."""
        v = self.interval
        if isinstance(v, Mapping):
            lo, hi = v.get("low"), v.get("high")
        elif isinstance(v, Sequence) and not isinstance(v, str) and len(v) == 2:
            lo, hi = v
        else:
            return None
        return (lo, hi) if _finite(lo) and _finite(hi) else None

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class SearchView:
    """``record.search``: ``skipped`` (why it did not run), or the summary fields (as
    recorded, in record order) and the search's lists."""

    summary: dict[str, Any] = view_field(factory=dict)
    skipped: Any = None
    evaluations: list[SearchEval] = field(default_factory=list)
    pareto: list[Any] = field(default_factory=list)  # SearchEval, or an evaluation's index
    fp16_nodes: Any = None
    pruned: list[Any] = field(default_factory=list)
    ranking: list[Any] = field(default_factory=list)
    proxy: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> SearchView:
        d = mapping(d)
        found = d.get("fp16_nodes", d.get("found"))
        return cls(summary={k: v for k, v in d.items() if k not in SEARCH_LISTS},
                   skipped=d.get("skipped"),
                   evaluations=[SearchEval.from_dict(e, i)
                                for i, e in enumerate(seq(d.get("evaluations")))
                                if isinstance(e, Mapping)],
                   pareto=[SearchEval.from_dict(p) if isinstance(p, Mapping) else p
                           for p in seq(d.get("pareto"))],
                   fp16_nodes=found, pruned=seq(d.get("pruned")), ranking=seq(d.get("ranking")),
                   proxy={str(n): mapping(v) for n, v in mapping(d.get("proxy")).items()})

    @classmethod
    def parse(cls, d: Any) -> SearchView | None:
        """The search of a non-empty recorded mapping, else None (no search)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    @property
    def status(self) -> Any:
        """The status of the set found (None when not recorded)."""
        return self.summary["status"] if "status" in self.summary else None

    def proxy_score(self, node: Any, key: str) -> Any:
        """Proxy score ``key`` of ``node`` (None when not recorded)."""
        scores = self.proxy[node] if node in self.proxy else {}
        return scores[key] if key in scores else None

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        if d["skipped"] is None:
            d.pop("skipped")
        return d
