"""What one post-training step changed: a small, JSON-ready record for the run record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    """``name`` of the technique, its ``params``, and ``changes``: target (node or tensor)
    -> a short description of what changed there; ``skipped``: target -> why not."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        return f"{self.name}: {len(self.changes)} changed, {len(self.skipped)} skipped"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": dict(self.params), "changes": dict(self.changes),
                "skipped": dict(self.skipped)}
