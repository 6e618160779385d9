"""Run a model over a text split in length-sorted batches; outputs back in original order."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from quantkit.data.text import TextEncoder, iter_feeds
from quantkit.progress import track


def run_split(runner, encoder: TextEncoder, texts: list[str], *, output: str, batch_size: int,
              progress: bool = True, desc: str = "", lengths: np.ndarray | None = None,
              output_names: list[str] | None = None,
              on_batch: Callable[[np.ndarray, dict[str, np.ndarray]], None] | None = None
              ) -> np.ndarray:
    """Logits (``output``) for every text; ``on_batch(idx, outputs)`` sees every batch's outputs."""
    result: np.ndarray | None = None
    n_batches = -(-len(texts) // batch_size)
    names = output_names or [output]
    for idx, feed in track(iter_feeds(encoder, texts, batch_size, lengths), total=n_batches,
                           desc=desc, enabled=progress):
        outs = runner.infer(feed, names) if output_names else runner.infer(feed, [output])
        y = outs[output]
        if result is None:
            result = np.zeros((len(texts),) + y.shape[1:], dtype=np.float32)
        result[idx] = y
        if on_batch is not None:
            on_batch(idx, outs)
    assert result is not None
    return result
