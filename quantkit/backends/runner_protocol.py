"""The Runner protocol every backend implements (Polygraphy's shape: a context manager)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

_MEMBERS = ("name", "output_names", "infer", "__enter__", "__exit__")
_ABSENT = object()


class _StaticCheck(type(Protocol)):
    """``isinstance(x, Runner)`` looks members up statically (Python 3.12's rule): a runner's
    ``output_names`` property only works inside its ``with`` block and must not be run."""

    def __instancecheck__(cls, instance) -> bool:
        if cls.__name__ == "Runner" and cls.__module__ == __name__:
            return all(inspect.getattr_static(instance, m, _ABSENT) is not _ABSENT
                       for m in _MEMBERS)
        return super().__instancecheck__(instance)


@runtime_checkable
class Runner(Protocol, metaclass=_StaticCheck):
    """Runs one model. ``with runner as r: outputs = r.infer(feed)``.

    ``output_names``: what ``infer`` returns by default (inside the ``with`` block);
    ``infer(feed, output_names)`` returns only the named outputs (e.g. the extra tensors a
    calibration or per-layer run marked). Callers never test for a concrete runner class.
    """

    name: str

    def __enter__(self) -> "Runner": ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def output_names(self) -> list[str]: ...

    def infer(self, feed: dict[str, np.ndarray],
              output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...
