"""A recorded verdict (``candidate.verdict``, a search evaluation's ``extra.verdict``) and the
sign-off test it carries (``verdict.signoff``, ``signoff.dev`` / ``test``): what
quantkit.verdict.outcome.SignoffTest writes (``to_verdict_dict`` / ``to_dict``)."""

from __future__ import annotations

from dataclasses import dataclass

from quantkit.record.serde import JsonObject, inline, optional
from quantkit.verdict.cluster import GroupStats

__all__ = ["DecidedAt", "Gallery", "Interval", "Margin", "MarginValue", "McNemar",
           "ShareTolerance", "SliceInterval", "SliceTest", "SliceVerdict", "TestRecord",
           "VerdictRecord"]


@dataclass
class Interval:
    """A delta vs FP32 (or a share): point, two-sided interval at ``level``, the values."""

    point: float | None
    low: float | None
    high: float | None
    level: float | None
    se: float | None
    ref: float | None
    cand: float | None

    @property
    def bounds(self) -> tuple[float, float] | None:
        """(low, high) when both are recorded."""
        return None if self.low is None or self.high is None else (self.low, self.high)


@dataclass
class SliceInterval:
    """A slice's delta vs FP32 (records before the per-slice tests were folded)."""

    point: float | None
    low: float | None
    high: float | None
    level: float | None
    se: float | None


@dataclass
class Gallery:
    """The recall@k gallery of a label-free verdict (run/evaluation.py: gallery_info)."""

    size: int
    sha256: str
    source: str
    requested: int
    seed: int


@dataclass
class MarginValue:
    """A labelled margin: as declared (``value``, of ``kind`` relative or absolute) and
    in metric units (``abs``)."""

    value: float
    abs: float


@dataclass
class ShareTolerance:
    """A label-free per-example tolerance: the examples within ``bound`` (on the better
    side) must be shown to be a share of at least ``min_share`` (the ``quantile``)."""

    quantile: float
    bound: float
    min_share: float
    higher_is_better: bool


@dataclass
class DecidedAt:
    """The decision metric and the threshold its interval is held against."""

    metric: str
    threshold: float


@dataclass(kw_only=True)
class Margin:
    """What a verdict decides against: a labelled margin (``kind`` relative / absolute), a
    per-example tolerance tested as a share (``kind`` proportion, ``test``), top-1 agreement
    (``min_agreement``) or, in records before issue 24, a floor / ceiling of a mean; in a
    candidate's verdict also the metric and threshold it was decided at."""

    kind: str | None = optional()
    labelled: MarginValue | None = inline()
    share: ShareTolerance | None = inline()
    test: str | None = optional()
    gallery: Gallery | None = optional()
    min_agreement: float | None = optional()
    floor: float | None = optional()
    ceiling: float | None = optional()
    decided: DecidedAt | None = inline()
    relative_to: str | None = optional()  # an mAP margin: what the relative margin is of


@dataclass
class McNemar:
    """The discordant pairs (b, c); schema 0 / 1 also a, d and the exact p-value."""

    b: int | None
    c: int | None
    a: int | None = optional()
    d: int | None = optional()
    p: float | None = optional()


@dataclass
class SliceTest:
    """A slice's own test (schema 0): the values, the delta and its margin, Holm-adjusted
    p-values."""

    ref: float | None
    cand: float | None
    delta: SliceInterval | None
    margin_abs: float | None
    n_boot: int
    p_noninferiority: float | None
    p_noninferiority_holm: float | None
    p_regression: float | None
    p_regression_holm: float | None


@dataclass(kw_only=True)
class SliceVerdict:
    """One slice's verdict (records before the per-slice tests were folded into the
    sign-off; written empty since)."""

    slice: str
    value: str
    reason: str | None = optional()
    n: int
    status: str
    test: SliceTest | None = inline()


@dataclass
class TestRecord:
    """One sign-off test (SignoffTest.to_dict): status, interval, p-values, what they rest
    on; ``gate``: the churn gate's own test joined to it."""

    __test__ = False  # not a pytest class

    candidate: str
    metric: str
    status: str
    point: float | None
    low: float | None
    high: float | None
    level: float
    alpha_one_sided: float
    threshold: float
    p_noninferiority: float
    p_regression: float
    n: int
    ref: float | None
    cand: float | None
    flip_rate: float | None
    discordant: dict[str, int | None]
    methods: dict[str, JsonObject]
    groups: GroupStats | None
    reasons: list[str]
    margin: Margin
    plan_n: int | None
    gate: TestRecord | None


@dataclass
class VerdictRecord:
    """``candidate.verdict``: status, reasons, the deltas vs FP32, the margin, n, the size a
    new plan would need; ``signoff`` the test itself and ``split`` (schema 2 on);
    ``raw_status`` a family member's status before familywise control."""

    status: str
    reasons: list[str]
    deltas: dict[str, Interval]
    mcnemar: McNemar
    margin: Margin
    n: int
    required_n: int | None
    slices: list[SliceVerdict]
    metric: str
    alpha: float
    signoff: TestRecord | None = optional()
    split: str | None = optional()
    raw_status: str | None = optional()

    @property
    def decision_metric(self) -> str | None:
        """The metric the verdict decides on (``metric``, else the margin's)."""
        return self.metric or (self.margin.decided.metric if self.margin.decided else None)

    def delta(self, metric: str | None) -> Interval | None:
        """The delta vs FP32 of ``metric``, None when not measured."""
        return self.deltas.get(metric) if metric is not None else None
