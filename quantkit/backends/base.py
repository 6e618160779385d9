"""The Runner protocol every backend implements (Polygraphy's shape: a context manager)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Runner(Protocol):
    """Runs one model. ``with runner as r: outputs = r.infer(feed)``."""

    name: str

    def __enter__(self) -> "Runner": ...

    def __exit__(self, *exc: object) -> None: ...

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
