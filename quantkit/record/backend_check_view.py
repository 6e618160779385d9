"""A candidate's engine check (``candidate.backend_check``): status, gate, budget split."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import FlatView, mapping, view_to_dict

__all__ = ["BackendCheckView", "BudgetView", "GateView"]


@dataclass(frozen=True)
class GateView(FlatView):
    """The engine gate: observed vs tolerance, in the decision metric's units."""

    units: Any = ""
    observed: Any = None
    tolerance: Any = None


@dataclass(frozen=True)
class BudgetView(FlatView):
    """The declared budget's split between the sign-off and the engine check."""

    share: Any = None
    metric: Any = None
    declared: Any = None
    signoff: Any = None
    tolerance: Any = None
    units: Any = None
    composition: Any = None


@dataclass(frozen=True)
class BackendCheckView:
    """The engine check (issue 24: ``gates_recommendation`` set) or, in older records, the
    backend agreement check (``checked``, ``ok``, ``agreement``, ``accuracy``)."""

    status: Any = None
    checked: Any = None
    ok: Any = None
    gates_recommendation: Any = None
    is_engine_check: bool = False
    what_to_run: Any = None
    reason: Any = None
    deployment: Any = None
    agreement: Any = None
    n: Any = None
    accuracy: dict[str, Any] = field(default_factory=dict)
    gate: GateView = field(default_factory=GateView)
    budget: BudgetView | None = None

    @classmethod
    def from_dict(cls, d: Any) -> BackendCheckView:
        d = mapping(d)
        budget = d.get("budget")
        return cls(status=d.get("status"), checked=d.get("checked"), ok=d.get("ok"),
                   gates_recommendation=d.get("gates_recommendation"),
                   is_engine_check="gates_recommendation" in d,
                   what_to_run=d.get("what_to_run"), reason=d.get("reason"),
                   deployment=d.get("deployment", ""), agreement=d.get("agreement"), n=d.get("n"),
                   accuracy=mapping(d.get("accuracy")), gate=GateView.from_dict(d.get("gate")),
                   budget=BudgetView.from_dict(budget) if isinstance(budget, Mapping) else None)

    @classmethod
    def parse(cls, d: Any) -> BackendCheckView | None:
        return cls.from_dict(d) if isinstance(d, Mapping) else None

    def to_dict(self) -> dict[str, Any]:
        d = view_to_dict(self)
        if not d.pop("is_engine_check"):
            d.pop("gates_recommendation")
        return d
