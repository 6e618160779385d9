"""Parsing helpers of the record views: tolerant reads of a loaded record.json, and to_dict."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

_V = TypeVar("_V", bound="FlatView")

__all__ = ["FlatView", "mapping", "seq", "flat_view", "view_field", "view_to_dict"]


def mapping(x: Any) -> dict[str, Any]:
    """``x`` as a dict when it is a mapping, else an empty dict (older or malformed records)."""
    return dict(x) if isinstance(x, Mapping) else {}


def seq(x: Any) -> list[Any]:
    """``x`` as a list (``x or []`` of a recorded list), else an empty list."""
    return list(x) if isinstance(x, (list, tuple)) else list(x or [])


def flat_view(cls: type, d: Any) -> Any:
    """A flat view (every field a plain value with a default) read from the record dict
    ``d``: each field from the key of its name, its default where the key is missing."""
    d = mapping(d)
    return cls(**{f.name: d.get(f.name, f.default) for f in dataclasses.fields(cls)})


def view_field(*path: str, default: Any = None, factory: Any = None) -> Any:
    """A dataclass field written by :func:`view_to_dict` under the record keys ``path``
    (``()`` merges a dict field into its parent)."""
    kw: dict[str, Any] = {"metadata": {"path": path}}
    if factory is not None:
        kw["default_factory"] = factory
    else:
        kw["default"] = default
    return dataclasses.field(**kw)


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return x.to_dict() if hasattr(x, "to_dict") else view_to_dict(x)
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def view_to_dict(view: Any) -> dict[str, Any]:
    """A view back as the record's dict: each field under its key (or the key path its
    :func:`view_field` names); nested views, dicts and lists converted alike."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(view):
        value = _plain(getattr(view, f.name))
        path = f.metadata.get("path", (f.name,))
        if not path:
            out.update(value or {})
            continue
        at = out
        for k in path[:-1]:
            at = at.setdefault(k, {})
        at[path[-1]] = value
    return out


class FlatView:
    """Base of a flat record view (a frozen dataclass whose fields are plain values with
    defaults): read with :func:`flat_view`, written back with :func:`view_to_dict`."""

    @classmethod
    def from_dict(cls: type[_V], d: Any) -> _V:
        return flat_view(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return view_to_dict(self)
