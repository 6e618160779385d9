"""Run a model over a split in batches from its Feeds; outputs back in original order.

Text batches come in length order (less padding), image batches in order; either way each
batch carries its indices, so the result rows line up with the split's examples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from quantkit.errors import ModelError
from quantkit.progress import track

if TYPE_CHECKING:
    from quantkit.data.feeds import Feeds


def run_split(runner, feeds: "Feeds", data, *, output: str, batch_size: int,
              progress: bool = True, desc: str = "", lengths: np.ndarray | None = None,
              output_names: list[str] | None = None,
              on_batch: Callable[[np.ndarray, dict[str, np.ndarray]], None] | None = None
              ) -> np.ndarray:
    """Logits (``output``) for every example of ``data``; ``on_batch(idx, outputs)`` sees
    every batch's outputs.

    ``feeds``: a :class:`~quantkit.data.feeds.TextFeeds` / ``ImageFeeds``; ``data``: a split or its raw items (texts, uint8 images).
    ``lengths``: token counts of text examples (computed when omitted; unused for images).
    """
    result: np.ndarray | None = None
    n = len(data)
    n_batches = -(-n // batch_size)
    names = output_names or [output]
    for idx, feed in track(feeds.batches(data, batch_size, lengths=lengths), total=n_batches,
                           desc=desc, enabled=progress):
        outs = runner.infer(feed, names) if output_names else runner.infer(feed, [output])
        y = outs[output]
        if getattr(feeds, "pooling", "none") != "none":  # token-level -> one row per example
            y = feeds.pool(y, feed)
        if result is None:
            result = np.zeros((n,) + y.shape[1:], dtype=np.float32)
        elif result.shape[1:] != y.shape[1:]:
            raise ModelError(f"the output {output} has per-example shape {list(y.shape[1:])} "
                             f"in one batch and {list(result.shape[1:])} in another: its width "
                             "follows the input", where="model.output.name", value=output,
                             fix="select an output of fixed width (logits or a pooled "
                                 "embedding) with model.output.name, or pool token states "
                                 "with model.output.kind=embedding")
        result[idx] = y
        if on_batch is not None:
            on_batch(idx, outs)
    assert result is not None
    return result
