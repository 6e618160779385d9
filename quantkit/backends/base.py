"""The Runner protocol every backend implements (Polygraphy's shape: a context manager)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Runner(Protocol):
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
