"""What one post-training step changed: a small, JSON-ready record for the run record."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    """``name`` of the technique, its ``params``, and ``changes``: target (node or tensor)
    -> a short description of what changed there; ``skipped``: target -> why not;
    ``groups``: the nodes each rewrite changed together (names in the graph before the step
    and nodes it inserted): a plan that quantizes no node of a group runs the group as the
    graph before the step did (:mod:`quantkit.ptq.restore`)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    groups: tuple[tuple[str, ...], ...] = ()

    def summary(self) -> str:
        return f"{self.name}: {len(self.changes)} changed, {len(self.skipped)} skipped"

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "params": dict(self.params), "changes": dict(self.changes),
               "skipped": dict(self.skipped)}
        if self.groups:
            out["groups"] = [list(g) for g in self.groups]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepRecord":
        return cls(name=d["name"], params=dict(d.get("params", {})),
                   changes=dict(d.get("changes", {})), skipped=dict(d.get("skipped", {})),
                   groups=tuple(tuple(g) for g in d.get("groups", ())))


def groups_of(records: Iterable[StepRecord]) -> tuple[tuple[str, ...], ...]:
    """Every node group of ``records``, in order."""
    return tuple(g for r in records for g in r.groups)
