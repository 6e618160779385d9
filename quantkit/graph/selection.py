"""What ``precision.include_nodes`` / ``precision.exclude_nodes`` mean, in one place.

Each entry is a Python regular expression matched against the WHOLE node name
(``re.fullmatch``, like ``precision.force``), so a plain node name selects exactly that
node and ``"/encoder/layer\\.0/.*"`` selects a block. Names are the ones quantkit gives
(unnamed nodes are ``<op_type>_<index>``). When include patterns are given a node must
match one; a node matching an exclude pattern is dropped. A pattern that matches no node
of the model is a ConfigError (a typo would otherwise silently quantize everything).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from quantkit.errors import ConfigError

__all__ = ["NodeSelection"]


def _compile(patterns: Sequence[str] | str, where: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    if isinstance(patterns, str):
        patterns = (patterns,)
    out = []
    for p in patterns:
        try:
            out.append((p, re.compile(p)))
        except re.error as exc:
            raise ConfigError(f"invalid regular expression ({exc})", where=where, value=p,
                              fix="write a Python regex matched against the whole node name "
                                  "(re.fullmatch); escape '.', '(', '[' in literal names") from exc
    return tuple(out)


@dataclass(frozen=True)
class NodeSelection:
    """Compiled include / exclude patterns (see the module docstring)."""

    include: tuple[tuple[str, re.Pattern[str]], ...] = ()
    exclude: tuple[tuple[str, re.Pattern[str]], ...] = ()

    @classmethod
    def from_patterns(cls, include: Sequence[str] | str = (), exclude: Sequence[str] | str = (),
                      *, where: str = "precision") -> "NodeSelection":
        return cls(_compile(include, f"{where}.include_nodes"),
                   _compile(exclude, f"{where}.exclude_nodes"))

    def excluded(self, name: str) -> bool:
        return any(rx.fullmatch(name) for _, rx in self.exclude)

    def not_included(self, name: str) -> bool:
        return bool(self.include) and not any(rx.fullmatch(name) for _, rx in self.include)

    def selects(self, name: str) -> bool:
        """True when node ``name`` passes both lists."""
        return not self.not_included(name) and not self.excluded(name)

    def check_matches(self, names: Iterable[str], *, where: str = "precision") -> None:
        """ConfigError naming the first pattern that matches none of ``names``."""
        names = list(names)
        for what, pats in (("include_nodes", self.include), ("exclude_nodes", self.exclude)):
            for p, rx in pats:
                if not any(rx.fullmatch(n) for n in names):
                    close = difflib.get_close_matches(p, names, n=3)
                    raise ConfigError(
                        f"{what} pattern matches no node of the model", where=f"{where}.{what}",
                        value=p, fix=(f"did you mean {', '.join(close)}?" if close else
                                      "patterns match whole node names (re.fullmatch); "
                                      "quantkit names unnamed nodes <op_type>_<index>"))
