"""The dev / test sign-off of the record (``record.signoff``): the family, its power plan,
the test ledger, this look of the persistent ledger, the decision and what was not tested."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from quantkit.record.dict_parse import mapping, seq, view_field, view_to_dict

__all__ = ["DecisionRow", "EarlierLook", "LookView", "PowerRow", "SignoffView", "TestEntry"]


def _keys(d: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {k: d.get(k) for k in names}


@dataclass(frozen=True)
class DecisionRow:
    """A family member's familywise decision."""

    candidate: Any = None
    raw_status: Any = None
    status: Any = None
    reason: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> DecisionRow:
        return cls(**_keys(mapping(d), ("candidate", "raw_status", "status", "reason")))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class TestEntry:
    """A member's one look at test: the delta's point and interval, n, flip rate, ICC."""

    __test__ = False  # not a pytest class

    point: Any = None
    low: Any = None
    high: Any = None
    n: Any = None
    flip_rate: Any = None
    icc: Any = view_field("groups", "icc")

    @classmethod
    def from_dict(cls, d: Any) -> TestEntry:
        d = mapping(d)
        return cls(**_keys(d, ("point", "low", "high", "n", "flip_rate")),
                   icc=mapping(d.get("groups")).get("icc"))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class PowerRow:
    """A member's row of the power plan."""

    candidate: Any = None
    n_required: Any = None
    n_available: Any = None
    adequate: Any = None
    planned_power: Any = None
    tested: Any = None
    reason: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> PowerRow:
        return cls(**_keys(mapping(d), ("candidate", "n_required", "n_available", "adequate",
                                        "planned_power", "tested", "reason")))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class EarlierLook:
    """An earlier look of the persistent test ledger on overlapping test examples."""

    look: Any = None
    id: Any = None
    started: Any = None
    alpha_one_sided: Any = None
    metric: Any = None
    statuses: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    shared_examples: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> EarlierLook:
        d = mapping(d)
        return cls(**_keys(d, ("look", "id", "started", "alpha_one_sided", "metric", "state",
                               "shared_examples")), statuses=mapping(d.get("statuses")))

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class LookView:
    """This run's look of the persistent test ledger (``signoff.ledger``)."""

    summary: Any = None
    path: Any = None
    look_id: Any = None
    rule: Any = None
    same_data: Any = None
    alpha_one_sided: Any = None
    alpha_declared: Any = None
    supersedes: Any = None
    other_data_looks: Any = None
    earlier_looks: list[EarlierLook] = field(default_factory=list)
    read_from_ledger: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> LookView:
        d = mapping(d)
        return cls(**_keys(d, ("summary", "path", "look_id", "rule", "same_data",
                               "alpha_one_sided", "alpha_declared", "supersedes",
                               "other_data_looks", "read_from_ledger")),
                   earlier_looks=[EarlierLook.from_dict(e) for e in seq(d.get("earlier_looks"))])

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)


@dataclass(frozen=True)
class SignoffView:
    """``record.signoff`` (schema 2 on; ``ledger`` / ``not_tested`` schema 3)."""

    family: list[Any] = view_field("family", "candidates", factory=list)
    basis_rule: Any = view_field("family", "basis_rule")
    method: Any = None
    alpha_one_sided: Any = None
    decision: list[DecisionRow] = view_field("decision", "rows", factory=list)
    test: dict[str, TestEntry] = field(default_factory=dict)
    power_plan: list[PowerRow] = view_field("power_plan", "rows", factory=list)
    ledger_evaluations: list[Any] = view_field("test_ledger", "evaluations", factory=list)
    evaluated_once: Any = view_field("test_ledger", "evaluated_once")
    ledger: LookView | None = None
    not_tested: dict[str, Any] = field(default_factory=dict)
    reason: Any = view_field("recommendation", "reason")
    excluded: dict[str, Any] = view_field("recommendation", "excluded", factory=dict)
    skipped: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> SignoffView:
        d = mapping(d)
        fam, ledger, rec = mapping(d.get("family")), mapping(d.get("test_ledger")), \
            mapping(d.get("recommendation"))
        look = d.get("ledger")
        return cls(family=seq(fam.get("candidates")),
                   basis_rule=fam.get("basis_rule") or fam.get("rule"),
                   method=d.get("method"), alpha_one_sided=d.get("alpha_one_sided"),
                   decision=[DecisionRow.from_dict(r)
                             for r in seq(mapping(d.get("decision")).get("rows"))],
                   test={str(k): TestEntry.from_dict(t) for k, t in mapping(d.get("test")).items()},
                   power_plan=[PowerRow.from_dict(r)
                               for r in seq(mapping(d.get("power_plan")).get("rows"))],
                   ledger_evaluations=[{"candidate": e.get("candidate"), "n": e.get("n")}
                                       for e in seq(ledger.get("evaluations", []))
                                       if isinstance(e, Mapping)],
                   evaluated_once=ledger.get("evaluated_once"),
                   ledger=LookView.from_dict(look) if isinstance(look, Mapping) and look else None,
                   not_tested=mapping(d.get("not_tested")), reason=rec.get("reason"),
                   excluded=mapping(rec.get("excluded")), skipped=d.get("skipped"))

    @classmethod
    def parse(cls, d: Any) -> SignoffView | None:
        """The sign-off of a non-empty recorded mapping, else None (a record from before the
        dev / test sign-off)."""
        return cls.from_dict(d) if isinstance(d, Mapping) and d else None

    def test_of(self, name: Any) -> TestEntry:
        """The test look of member ``name`` (empty when it was not tested)."""
        return self.test[name] if name in self.test else TestEntry()

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)
