"""The retrieval gallery of recall@k: a fixed set of examples every query is searched in.

recall@k searched neighbours inside the evaluated split, so its value depended on the
split's size (issue 24; measured: benchmarks/results/minilm_embed.md). Here the gallery is
fixed apart from the queries: a seeded subset of ``verdict.gallery_size`` examples of the
**train** split (disjoint by group from dev and test; never what the sign-off evaluates),
the same for dev and test, embedded by FP32 and by each candidate. A query's recall then
depends on the query and the gallery only, so the mean recall estimates one quantity
whatever the number of queries, and conditional on the gallery the queries are independent.
The gallery's size and sha256 are recorded.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GALLERY_STREAM", "recall_gallery"]

#: rng stream of the gallery draw (data/splits.py uses 0-2 for the partition and limits)
GALLERY_STREAM = 3


def recall_gallery(splits, *, size: int, seed: int):
    """A seeded subset of ``size`` train examples named "gallery" (all of train when it
    is smaller; None when train is empty). Deterministic given the splits and seed."""
    train = splits.train
    n = len(train)
    if n == 0:
        return None
    rng = np.random.default_rng([seed, GALLERY_STREAM])
    idx = np.sort(rng.choice(n, size=min(int(size), n), replace=False))
    return train.subset(idx, "gallery")
