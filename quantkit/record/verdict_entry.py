"""A candidate's recorded verdict: status, decision metric, margin, deltas, slices, McNemar."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, seq, view_to_dict
from quantkit.record.interval_view import IntervalView

__all__ = ["GalleryView", "MarginView", "McNemarView", "SliceVerdict", "VerdictEntry"]


@dataclass(frozen=True)
class GalleryView(FlatView):
    """The recall@k gallery of a label-free verdict."""

    size: Any = None
    source: Any = None
    sha256: Any = None


@dataclass(frozen=True)
class MarginView:
    """The verdict's margin: labelled (kind, value, abs) or label-free (a floor, a ceiling,
    a minimum agreement, or a per-example tolerance ``bound`` tested at a ``quantile``)."""

    kind: Any = None
    value: Any = None
    abs: Any = None
    metric: Any = None
    quantile: Any = None
    bound: Any = None
    min_share: Any = None
    higher_is_better: Any = True
    gallery: GalleryView | None = None
    floor: Any = None
    ceiling: Any = None
    min_agreement: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> MarginView:
        d = mapping(d)
        gal = d.get("gallery")
        return cls(kind=d.get("kind"), value=d.get("value"), abs=d.get("abs"),
                   metric=d.get("metric"), quantile=d.get("quantile"), bound=d.get("bound"),
                   min_share=d.get("min_share"), higher_is_better=d.get("higher_is_better", True),
                   gallery=GalleryView.from_dict(gal) if isinstance(gal, Mapping) else None,
                   floor=d.get("floor"), ceiling=d.get("ceiling"),
                   min_agreement=d.get("min_agreement"))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class McNemarView(FlatView):
    """McNemar's discordant pairs (b, c) and p-value."""

    b: Any = None
    c: Any = None
    p: Any = None


@dataclass(frozen=True)
class SliceVerdict:
    """One slice's verdict (slice=value): its interval, margin, Holm p-values, status."""

    slice: Any = None
    value: Any = None
    n: Any = None
    ref: Any = None
    cand: Any = None
    delta: IntervalView | None = None
    margin_abs: Any = None
    p_noninferiority_holm: Any = None
    p_regression_holm: Any = None
    status: Any = None
    reason: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> SliceVerdict:
        d = mapping(d)
        return cls(slice=d.get("slice"), value=d.get("value"), n=d.get("n"), ref=d.get("ref"),
                   cand=d.get("cand"), delta=IntervalView.parse(d.get("delta")),
                   margin_abs=d.get("margin_abs"),
                   p_noninferiority_holm=d.get("p_noninferiority_holm"),
                   p_regression_holm=d.get("p_regression_holm"), status=d.get("status"),
                   reason=d.get("reason"))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class VerdictEntry:
    """``candidate.verdict``; ``split`` is "dev" for a dev verdict (absent before schema 2)."""

    status: Any = None
    metric: Any = None
    margin: MarginView = field(default_factory=MarginView)
    deltas: dict[str, IntervalView] = field(default_factory=dict)
    reasons: list[Any] = field(default_factory=list)
    required_n: Any = None
    alpha: Any = None
    n: Any = None
    mcnemar: McNemarView = field(default_factory=McNemarView)
    slices: list[SliceVerdict] = field(default_factory=list)
    slices_recorded: bool = False
    split: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> VerdictEntry:
        d = mapping(d)
        deltas = {str(k): IntervalView.from_dict(v) for k, v in mapping(d.get("deltas")).items()
                  if isinstance(v, Mapping) and v}
        sl = d.get("slices") or []
        return cls(status=d.get("status"), metric=d.get("metric"),
                   margin=MarginView.from_dict(d.get("margin")), deltas=deltas,
                   reasons=seq(d.get("reasons")), required_n=d.get("required_n"),
                   alpha=d.get("alpha"), n=d.get("n"),
                   mcnemar=McNemarView.from_dict(d.get("mcnemar")),
                   slices=[SliceVerdict.from_dict(s) for s in sl if isinstance(s, Mapping)],
                   slices_recorded=bool(sl), split=d.get("split"))

    @classmethod
    def parse(cls, d: Any) -> VerdictEntry | None:
        """The verdict of a recorded mapping, else None (no verdict: the FP32 reference)."""
        return cls.from_dict(d) if isinstance(d, Mapping) else None

    @property
    def decision_metric(self) -> Any:
        """The metric the verdict decides on (``metric``, else the margin's)."""
        return self.metric or self.margin.metric

    def delta(self, metric: Any) -> IntervalView | None:
        """The delta vs FP32 of ``metric``, None when not measured."""
        return self.deltas[metric] if metric in self.deltas else None

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        d.pop("slices_recorded")
        return d
