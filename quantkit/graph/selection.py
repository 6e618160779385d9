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

__all__ = ["NodeSelection", "node_name_list"]


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


def node_name_list(value: Sequence[str] | str, *, where: str, what: str, fix: str) -> list[str]:
    """``value`` as a list of distinct node names (``what``: "ranking", "nodes"...); one
    ConfigError naming ``where`` for a bare string, a non-string entry or a name listed twice."""
    if isinstance(value, str):
        raise ConfigError(f"{what} must be a list of node names, not one string", where=where,
                          value=value, fix=f"pass [{value!r}]")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{what} must hold node names (str)", where=where, value=names,
                          fix=fix)
    if len(set(names)) != len(names):
        dup = next(n for i, n in enumerate(names) if n in names[:i])
        raise ConfigError(f"{what} lists a node twice", where=where, value=dup, fix=fix)
    return names
