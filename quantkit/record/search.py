"""The precision search of the record (``record.search``): what precision/fp16_search.py found
and every evaluation it paid for, the ranking and its proxy and measured scores, the dev
halves, the Pareto front and the format fill (run/format_fill.py); or why it was skipped."""

from __future__ import annotations

from dataclasses import dataclass, fields

from quantkit.record.serde import inline, optional, section
from quantkit.record.verdict import VerdictRecord

__all__ = ["DevHalvesRecord", "FormatFill", "FormatFillSkipped", "LayerEstimate",
           "MeasureCost", "MeasureStep", "ParetoPoint", "ProxyScore", "SearchEval",
           "SearchEvalExtra", "SearchRecord", "SearchSkipped"]


@dataclass
class PowerReading:
    """How a search evaluation's dev evidence reads against the test split: the power plan
    (text), the test size it needs (None: none would do) and its assurance."""

    power_plan: str
    n_required: int | None
    assurance: float


@dataclass(kw_only=True)
class SearchEvalExtra:
    """What the run adds to a search evaluation (run/sensitivity.py: powered_eval): its dev
    verdict, the power plan it was read with, the test size it needs and its assurance;
    ``reused``: the INT8 candidate whose evaluation it is; ``accuracy`` on the rows read."""

    verdict: VerdictRecord
    power: PowerReading | None = inline()  # schema 3 on
    reused: str | None = optional()
    accuracy: float | None = optional()


@dataclass(kw_only=True)
class SearchEval:
    """One evaluated FP16 set on dev: its size, status, metric (the decision metric's delta
    vs FP32) and interval; ``index`` / ``phase`` / ``k`` / ``seconds`` for the search's own
    evaluations (absent in a confirmation row)."""

    index: int | None = optional()
    phase: str | None = optional()
    k: int | None = optional()
    fp16_count: int
    fp16_set: list[str]
    status: str
    metric: float | None
    interval: list[float | None]
    seconds: float | None = optional()
    extra: SearchEvalExtra

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The interval as (low, high) when both ends are recorded."""
        lo, hi = (self.interval + [None, None])[:2]
        return None if lo is None or hi is None else (lo, hi)


@dataclass
class ParetoPoint:
    """A non-dominated evaluation: FP16 count, metric, status, set, k, its index."""

    fp16_count: int
    metric: float
    status: str
    fp16_set: list[str]
    k: int | None
    index: int


@dataclass
class ProxyScore:
    """A layer's one-pass proxy (precision/sensitivity.py: proxy_scores)."""

    sqnr_in_db: float | None
    sqnr_out_db: float | None
    clipping_rate: float | None
    inputs_missing: list[str]
    noise_in: float | None
    score: float | None
    added_noise: float | None
    noise_out: float | None
    drop_db: float | None

    def numbers(self) -> dict[str, float | None]:
        """Every score but ``inputs_missing``, in record order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "inputs_missing"}


@dataclass
class DevHalvesRecord:
    """How dev was split for the search (run/dev_halves.py): a selection half that chose,
    a confirmation half that read the chosen set again; why not when dev is too small."""

    split: bool
    reason: str
    selection_n: int | None
    confirmation_n: int | None


@dataclass
class MeasureStep:
    """One subset evaluation of the measured sensitivity: the set, its damage, seconds."""

    step: str
    node: str | None
    fp16_set: list[str]
    damage: float
    seconds: float


@dataclass
class MeasureCost:
    """What measuring the sensitivity cost: mode, evaluations, seconds, each step."""

    mode: str
    evaluations: int
    seconds: float
    baseline: float
    steps: list[MeasureStep]


@dataclass
class LayerEstimate:
    """The cost model's GEMM time of one kept layer in FP16 and FP8 on the target GPU."""

    fp16_ms: float
    fp8_ms: float
    basis: str
    label: str


@dataclass
class FormatFill:
    """``search.format_fill`` when it ran: the kept layers the cost model finds faster in
    FP8, the FP8 calibrator, the estimates, the dev status with them and why it was kept
    or not."""

    ran: bool
    fp8_layers: list[str]
    calibrator: str
    estimates: dict[str, LayerEstimate]
    status: str
    n_required: int | None
    why: str


@dataclass
class FormatFillSkipped:
    """``search.format_fill`` when it did not run, and why (with the estimates when the
    cost model was asked)."""

    ran: bool
    why: str
    estimates: dict[str, LayerEstimate] | None = optional()


@dataclass(kw_only=True)
class SearchRecord:
    """``record.search``: the set found (``fp16_nodes``) and its status, metric, interval;
    the search's bound and budget; the confirmation on the other dev half; every
    evaluation; the format fill; the ranking with its proxy and measured scores; the Pareto
    front."""

    fp16_nodes: list[str]
    status: str | None
    metric: float | None
    interval: list[float | None] | None
    k: int | None
    pruned: list[str]
    full_evals: int
    bound: int
    num_layers: int
    budget_exhausted: bool
    reason: str
    seconds: float
    confirmation: list[SearchEval] | None = optional()  # schema 3 on
    evaluations: list[SearchEval]
    format_fill: FormatFill | FormatFillSkipped | None = optional()
    calibrator: str
    quantizable_layers: int
    ranking: list[str]
    proxy: dict[str, ProxyScore]
    measured: dict[str, float] | None = optional()
    proxy_remeasured_tensors: list[str] | None = optional()
    dev_halves: DevHalvesRecord | None = optional()
    measured_note: str | None = optional()
    measure_cost: MeasureCost | None = section()
    pareto: list[ParetoPoint]
    full_evals_linear: int


@dataclass
class SearchSkipped:
    """``record.search`` of a run that skipped the search, and why (a sweep job)."""

    skipped: str

