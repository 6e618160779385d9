"""Progress bars for long work (tqdm on stderr), silent when disabled or not a terminal."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def track(items: Iterable[T], *, total: int | None = None, desc: str = "",
          enabled: bool = True) -> Iterator[T]:
    if not enabled:
        yield from items
        return
    from tqdm.auto import tqdm

    yield from tqdm(items, total=total, desc=desc, leave=False, mininterval=1.0, dynamic_ncols=True)
