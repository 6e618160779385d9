"""QdqMap: which original tensor, consumer and role each tensor and node that insert_qdq
added stands for, so nobody parses names; saved beside each plan as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from quantkit.errors import GraphEditError

__all__ = ["ROLES", "QdqEntry", "QdqMap"]


#: Roles of inserted tensors in a QdqMap.
ROLES = ("quantized", "dequantized", "scale", "zero_point")


@dataclass(frozen=True)
class QdqEntry:
    """An inserted tensor or node: the original tensor it stands for and the node it feeds."""

    original: str
    consumer: str
    role: str


@dataclass
class QdqMap:
    """Inserted tensor name -> QdqEntry; ``nodes`` maps inserted Q/DQ node names the same way."""

    tensors: dict[str, QdqEntry] = field(default_factory=dict)
    nodes: dict[str, QdqEntry] = field(default_factory=dict)

    def original(self, name: str) -> str:
        """The original tensor an inserted tensor stands for; any other name maps to itself."""
        entry = self.tensors.get(name)
        return entry.original if entry else name

    def consumer(self, name: str) -> str | None:
        """The node an inserted tensor feeds (None for tensors that were not inserted)."""
        entry = self.tensors.get(name)
        return entry.consumer if entry else None

    def inserted_for(self, original: str, role: str = "dequantized") -> list[str]:
        """Inserted tensors of ``role`` that stand for ``original`` (one per consumer)."""
        return [n for n, e in self.tensors.items() if e.original == original and e.role == role]

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __len__(self) -> int:
        return len(self.tensors)

    def to_dict(self) -> dict:
        return {kind: {n: {"original": e.original, "consumer": e.consumer, "role": e.role}
                       for n, e in getattr(self, kind).items()}
                for kind in ("tensors", "nodes")}

    @classmethod
    def from_dict(cls, data: Mapping) -> "QdqMap":
        try:
            return cls(**{kind: {n: QdqEntry(str(e["original"]), str(e["consumer"]), str(e["role"]))
                                 for n, e in data.get(kind, {}).items()}
                          for kind in ("tensors", "nodes")})
        except (KeyError, TypeError, AttributeError) as exc:
            raise GraphEditError("malformed QdqMap data", where="QdqMap.from_dict",
                                 value=repr(exc), fix="pass the dict written by QdqMap.to_dict()"
                                 ) from None
