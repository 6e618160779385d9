"""A candidate's recorded evidence: metrics, verdict, plan and precision counts, per-layer
numbers, latency, engine check, slices, artifact paths (``record.candidates[name]``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.backend_check_view import BackendCheckView
from quantkit.record.dict_parse import FlatView, mapping, seq, view_field, view_to_dict
from quantkit.record.latency_view import LatencyStats
from quantkit.record.verdict_entry import VerdictEntry

__all__ = ["AgreementStat", "CandidateView", "ClassStats", "CosineView", "FlaggedLayer",
           "LayerStats", "PlanDecision"]


@dataclass(frozen=True)
class LayerStats(FlatView):
    """One compared tensor of a candidate vs FP32."""

    sqnr_db: Any = None
    cosine: Any = None
    clipping_rate: Any = None
    relative_error: Any = None


@dataclass(frozen=True)
class FlaggedLayer(FlatView):
    """A tensor whose INT8 noise is compared against the FP16 floor."""

    name: Any = None
    flagged: Any = True
    ratio: Any = None
    fp16_sqnr_db: Any = None


@dataclass(frozen=True)
class PlanDecision(FlatView):
    """A node's precision in the plan, and why."""

    precision: Any = None
    reason: Any = None


@dataclass(frozen=True)
class ClassStats(FlatView):
    """Per-class precision, recall, F1, support."""

    precision: Any = None
    recall: Any = None
    f1: Any = None
    support: Any = None


@dataclass(frozen=True)
class AgreementStat(FlatView):
    """Top-1 agreement with FP32 on one slice value, over ``n`` examples."""

    agreement: Any = None
    n: Any = None


@dataclass(frozen=True)
class CosineView:
    """An embedding candidate's per-example cosine to FP32: summary and histogram bins."""

    n: Any = None
    mean: Any = 0
    p1: Any = 0
    counts: list[Any] = view_field("hist", "counts", factory=list)
    edges: list[Any] = view_field("hist", "edges", factory=list)

    @classmethod
    def parse(cls, d: Any) -> CosineView | None:
        """``candidate.embedding_fp32.cosine`` when it has its histogram, else None."""
        cos = mapping(mapping(d).get("cosine"))
        hist = cos.get("hist")
        if not isinstance(hist, Mapping):
            return None
        return cls(n=cos.get("n"), mean=cos.get("mean", 0), p1=cos.get("p1", 0),
                   counts=[int(x) for x in hist["counts"]], edges=[float(e) for e in hist["edges"]])

    def to_dict(self) -> dict[str, Any]:
        return {"cosine": view_to_dict(self)}


def _slices(d: Any) -> dict[str, dict[str, dict[str, Any]]]:
    return {str(s): {str(v): dict(st) if isinstance(st, Mapping) else st
                     for v, st in mapping(values).items()}
            for s, values in mapping(d).items()}


@dataclass(frozen=True)
class CandidateView:
    """One candidate's evidence as recorded (a family member's ``dev`` entry is its dev
    evidence; its own entry is on test)."""

    metrics: dict[str, Any] = field(default_factory=dict)
    per_class: dict[str, ClassStats] = view_field("metrics", "per_class", factory=dict)
    n: Any = None
    verdict: VerdictEntry | None = None
    dev: CandidateView | None = None
    split: Any = None
    numerics: Any = None
    calibrator: Any = None
    artifact: Any = None
    artifact_sha256: Any = None
    backend_check: BackendCheckView | None = None
    lint_violations: Any = view_field("lint", "violations")
    plan_counts: dict[str, Any] | None = None
    plan_decisions: dict[str, PlanDecision] | None = view_field("plan", "decisions")
    plan_reasons: dict[str, Any] | None = None
    fp16_layers: list[Any] = field(default_factory=list)
    layers: dict[str, LayerStats] = field(default_factory=dict)
    flagged_layers: list[FlaggedLayer] = field(default_factory=list)
    first_diverging: Any = None
    agreement_fp32: Any = None
    mean_kl_fp32: Any = None
    latency: dict[str, LatencyStats] | None = None
    slices: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    agreement_slices: dict[str, dict[str, AgreementStat]] = field(default_factory=dict)
    embedding_cosine: CosineView | None = view_field("embedding_fp32")
    kernel_census: dict[str, Any] | None = None
    has_plan: bool = False

    @classmethod
    def from_dict(cls, d: Any) -> CandidateView:
        d = mapping(d)
        metrics = mapping(d.get("metrics"))
        per_class = metrics.pop("per_class", None)
        plan = d.get("plan")
        decisions = mapping(plan).get("decisions")
        reasons = d.get("plan_reasons")
        dev = d.get("dev")
        counts = d.get("plan_counts")
        census = d.get("kernel_census")
        return cls(
            metrics=metrics,
            per_class={str(k): ClassStats.from_dict(s) for k, s in mapping(per_class).items()
                       if isinstance(s, Mapping)},
            n=d.get("n"), verdict=VerdictEntry.parse(d.get("verdict")),
            dev=cls.from_dict(dev) if isinstance(dev, Mapping) else None,
            split=d.get("split"), numerics=d.get("numerics"), calibrator=d.get("calibrator"),
            artifact=d.get("artifact"), artifact_sha256=d.get("artifact_sha256"),
            backend_check=BackendCheckView.parse(d.get("backend_check")),
            lint_violations=mapping(d.get("lint")).get("violations"),
            plan_counts=dict(counts) if isinstance(counts, Mapping) else None,
            plan_decisions={str(n): PlanDecision.from_dict(x) for n, x in decisions.items()}
            if isinstance(decisions, Mapping) else None,
            plan_reasons=(dict(reasons) if isinstance(reasons, Mapping) else {})
            if "plan_reasons" in d else None,
            fp16_layers=seq(d.get("fp16_layers")),
            layers={str(t): LayerStats.from_dict(s) for t, s in mapping(d.get("layers")).items()
                    if isinstance(s, Mapping)},
            flagged_layers=[FlaggedLayer.from_dict(f) for f in seq(d.get("flagged_layers"))
                            if isinstance(f, Mapping)],
            first_diverging=d.get("first_diverging"), agreement_fp32=d.get("agreement_fp32"),
            mean_kl_fp32=d.get("mean_kl_fp32"), latency=LatencyStats.per_batch(d.get("latency")),
            slices=_slices(d.get("slices")),
            agreement_slices={str(s): {str(v): AgreementStat.from_dict(st)
                                       for v, st in mapping(values).items()
                                       if isinstance(st, Mapping)}
                              for s, values in mapping(d.get("agreement_slices")).items()},
            embedding_cosine=CosineView.parse(d.get("embedding_fp32")),
            kernel_census=dict(census) if isinstance(census, Mapping) else None,
            has_plan=bool(plan))

    def metric(self, name: Any, default: Any = None) -> Any:
        """The recorded value of metric ``name`` (``metrics[name]``), else ``default``."""
        return self.metrics[name] if name in self.metrics else default

    def slice_stats(self, slice_name: Any, value: Any) -> dict[str, Any]:
        """The recorded stats of slice ``slice_name`` = ``value`` ({} when not recorded)."""
        st = self.slices[slice_name][value] if value in self.slices.get(slice_name, {}) else {}
        return st if st is not None else {}

    def plan_count(self, precision: Any) -> Any:
        """Nodes of the plan at ``precision`` (None when the plan has none recorded)."""
        counts = self.plan_counts or {}
        return counts[precision] if precision in counts else None

    def census_count(self, op: Any) -> Any:
        """Kernels of op type ``op`` in the deployed graph (None when not counted)."""
        census = self.kernel_census or {}
        return census[op] if op in census else None

    def agreement_stat(self, slice_name: Any, value: Any) -> AgreementStat | None:
        """Agreement with FP32 on slice ``slice_name`` = ``value`` (None when not recorded)."""
        values = self.agreement_slices[slice_name] if slice_name in self.agreement_slices else {}
        return values[value] if value in values else None

    def layer_sqnr(self, tensor: Any) -> Any:
        """SQNR (dB) of ``tensor``, None when not compared."""
        return self.layers[tensor].sqnr_db if tensor in self.layers else None

    def with_latency(self, latency: dict[str, LatencyStats] | None) -> CandidateView:
        return dataclasses.replace(self, latency=latency)

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        for key in ("plan_reasons", "dev", "verdict", "backend_check", "latency"):
            if d[key] is None:
                d.pop(key)
        if not d.pop("has_plan") and d["plan"]["decisions"] is None:
            d.pop("plan")
        elif d["plan"]["decisions"] is None:
            d["plan"] = {"decisions": None, "has_plan": True}
        if self.embedding_cosine is None:
            d.pop("embedding_fp32")
        else:
            d["embedding_fp32"] = self.embedding_cosine.to_dict()
        return d
