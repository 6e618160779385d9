"""Evidence for models whose output is an embedding, not class logits (issue 18).

A cosine near 1 can hide a changed retrieval: an INT8 sentence encoder with mean cosine 0.993
to FP32 still changed 9% of its top-10 neighbours. So besides the per-example cosine (with its
distribution) quantkit measures what an embedding is used for: retrieval agreement, the
recall@k of FP32's neighbours among the candidate's neighbours, per query.

The run measures retrieval against a fixed gallery (:func:`gallery_recall_at_k`,
``quantkit.data.gallery``): each query's k nearest gallery items by FP32 (query and gallery
embedded by FP32) against the candidate's (both embedded by the candidate). Searching
inside the evaluated set (:func:`neighbour_recall_at_k`) makes the value depend on how
many examples are evaluated, so it decides nothing.

Pure numpy; memory O(chunk x n) for the neighbour search, never O(n^2) at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from quantkit.errors import DataError

__all__ = ["cosine_per_example", "gallery_recall_at_k", "gallery_top1_agreement",
           "neighbour_recall_at_k", "top1_neighbour_agreement", "distribution",
           "embedding_evidence", "as_embeddings"]


def as_embeddings(output: Any, *, where: str = "model.output") -> np.ndarray:
    """2-D float64 (n, d) embeddings from a model output; token-level (n, t, d) must be pooled."""
    a = np.asarray(output)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise DataError("an embedding output must have shape (examples, dims)", where=where,
                        value=a.shape, fix="select a pooled output (model.output=<name>) or set "
                        "model.pooling=mean for token-level outputs")
    if not np.issubdtype(a.dtype, np.floating):
        raise DataError("an embedding output must be floating point", where=where,
                        value=str(a.dtype), fix="select the model's embedding output")
    return a.astype(np.float64, copy=False)


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norm > 0, norm, 1.0)


def cosine_per_example(reference: Any, candidate: Any) -> np.ndarray:
    """Cosine similarity of each candidate embedding to its FP32 reference, shape (n,).

    Two zero vectors count as identical (1.0); a zero vector against a non-zero one as 0.0.
    """
    r, c = as_embeddings(reference, where="reference"), as_embeddings(candidate, where="candidate")
    if r.shape != c.shape:
        raise DataError("reference and candidate embeddings differ in shape", where="candidate",
                        value=(r.shape, c.shape), fix="embed the same examples with the same model")
    nr, nc = np.linalg.norm(r, axis=1), np.linalg.norm(c, axis=1)
    dot = np.einsum("ij,ij->i", r, c)
    both_zero = (nr == 0) & (nc == 0)
    cos = np.where((nr > 0) & (nc > 0), dot / np.maximum(nr * nc, np.finfo(np.float64).tiny), 0.0)
    return np.clip(np.where(both_zero, 1.0, cos), -1.0, 1.0)


def _topk(unit: np.ndarray, k: int, chunk: int) -> np.ndarray:
    """Indices (n, k) of each row's k most similar other rows (cosine; self excluded).

    Ties are broken by the lower index, so the result is deterministic.
    """
    n = unit.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        sim = unit[start:stop] @ unit.T
        sim[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        out[start:stop] = _ranked_topk(sim, k)
    return out


def _ranked_topk(sim: np.ndarray, k: int) -> np.ndarray:
    """Each row's k largest columns in descending order, equal values by the lower column:
    exactly ``np.argsort(-sim, kind="stable")[:, :k]``, by a partition where no row has a
    tie at its k-th value (the sort of every column otherwise)."""
    neg = -sim
    kth = np.partition(neg, k - 1, axis=1)[:, k - 1:k]
    inside = neg <= kth
    if not (inside.sum(axis=1) == k).all():  # a tie at the k-th value: the stable sort decides
        return np.argsort(neg, axis=1, kind="stable")[:, :k]
    cols = np.nonzero(inside)[1].reshape(sim.shape[0], k)  # ascending column per row
    order = np.lexsort((cols, np.take_along_axis(neg, cols, axis=1)), axis=-1)
    return np.take_along_axis(cols, order, axis=1)


def _gallery_topk(queries: np.ndarray, gallery: np.ndarray, k: int, chunk: int) -> np.ndarray:
    """Indices (n, k) of each query's k most similar gallery rows (cosine; ties by index)."""
    n = queries.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        out[start:start + chunk] = _ranked_topk(queries[start:start + chunk] @ gallery.T, k)
    return out


def _gallery_inputs(ref_queries, cand_queries, ref_gallery, cand_gallery, k: int):
    rq, cq = (as_embeddings(a, where=w) for a, w in ((ref_queries, "reference"),
                                                     (cand_queries, "candidate")))
    rg, cg = (as_embeddings(a, where=w) for a, w in ((ref_gallery, "reference gallery"),
                                                     (cand_gallery, "candidate gallery")))
    if rq.shape != cq.shape or rg.shape != cg.shape or rq.shape[1] != rg.shape[1]:
        raise DataError("queries and gallery must be embedded by both models with one shape",
                        where="candidate", value=(rq.shape, cq.shape, rg.shape, cg.shape),
                        fix="embed the same queries and the same gallery with both models")
    if not 1 <= k <= rg.shape[0]:
        raise DataError("recall@k needs 1 <= k <= the gallery size", where="verdict.recall_k",
                        value={"k": k, "gallery": rg.shape[0]},
                        fix="lower verdict.recall_k, or raise verdict.gallery_size (drawn from "
                            "the train split: data.train.size)")
    return _unit(rq), _unit(cq), _unit(rg), _unit(cg)


def gallery_recall_at_k(ref_queries: Any, cand_queries: Any, ref_gallery: Any,
                        cand_gallery: Any, *, k: int = 10, chunk: int = 512) -> np.ndarray:
    """Per query: the share of its k nearest gallery items by FP32 (query and gallery
    embedded by FP32) that the candidate (query and gallery embedded by the candidate) also
    ranks in its top k. Shape (n queries,); a query's value does not depend on the other
    queries."""
    rq, cq, rg, cg = _gallery_inputs(ref_queries, cand_queries, ref_gallery, cand_gallery, k)
    ref_nn, cand_nn = _gallery_topk(rq, rg, k, chunk), _gallery_topk(cq, cg, k, chunk)
    hits = np.array([np.intersect1d(a, b, assume_unique=True).size
                     for a, b in zip(ref_nn, cand_nn)], dtype=np.float64)
    return hits / k


def gallery_top1_agreement(ref_queries: Any, cand_queries: Any, ref_gallery: Any,
                           cand_gallery: Any, *, chunk: int = 512) -> np.ndarray:
    """Per query: 1.0 when the candidate's nearest gallery item is FP32's."""
    rq, cq, rg, cg = _gallery_inputs(ref_queries, cand_queries, ref_gallery, cand_gallery, 1)
    return (_gallery_topk(rq, rg, 1, chunk)[:, 0] ==
            _gallery_topk(cq, cg, 1, chunk)[:, 0]).astype(np.float64)


def neighbour_recall_at_k(reference: Any, candidate: Any, *, k: int = 10,
                          chunk: int = 512) -> np.ndarray:
    """Per query: the share of FP32's k nearest neighbours that the candidate also ranks in its
    top k (cosine, within the evaluated set, the query itself excluded). Shape (n,).

    Its value depends on the size of the evaluated set; the run uses
    :func:`gallery_recall_at_k`."""
    r, c = as_embeddings(reference, where="reference"), as_embeddings(candidate, where="candidate")
    if r.shape != c.shape:
        raise DataError("reference and candidate embeddings differ in shape", where="candidate",
                        value=(r.shape, c.shape), fix="embed the same examples with the same model")
    n = r.shape[0]
    if not 1 <= k < n:
        raise DataError("recall@k needs 1 <= k < number of examples", where="verdict.recall_k",
                        value={"k": k, "n": n}, fix="lower verdict.recall_k or evaluate more examples")
    ref_nn = _topk(_unit(r), k, chunk)
    cand_nn = _topk(_unit(c), k, chunk)
    hits = np.array([np.intersect1d(a, b, assume_unique=True).size
                     for a, b in zip(ref_nn, cand_nn)], dtype=np.float64)
    return hits / k


def top1_neighbour_agreement(reference: Any, candidate: Any, *, chunk: int = 512) -> np.ndarray:
    """Per query: 1.0 when the candidate's nearest neighbour is FP32's nearest neighbour."""
    r, c = as_embeddings(reference, where="reference"), as_embeddings(candidate, where="candidate")
    if r.shape[0] < 2:
        raise DataError("neighbour agreement needs at least 2 examples", where="data.eval",
                        value=r.shape[0], fix="evaluate more examples")
    return (_topk(_unit(r), 1, chunk)[:, 0] == _topk(_unit(c), 1, chunk)[:, 0]).astype(np.float64)


def distribution(values: Any, *, bins: int = 20, lo: float | None = None,
                 hi: float | None = None) -> dict[str, Any]:
    """Summary of a per-example metric for the record and the report's histogram."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise DataError("no values to summarize", where="distribution", value=0,
                        fix="evaluate at least one example")
    lo = float(v.min()) if lo is None else lo
    hi = float(v.max()) if hi is None else hi
    if hi <= lo:
        hi = lo + 1e-12
    counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
    q = np.quantile(v, [0.0, 0.01, 0.05, 0.5, 0.95, 1.0])
    return {"n": int(v.size), "mean": float(v.mean()), "min": float(q[0]), "p1": float(q[1]),
            "p5": float(q[2]), "median": float(q[3]), "p95": float(q[4]), "max": float(q[5]),
            "hist": {"counts": counts.tolist(), "edges": [float(e) for e in edges]}}


def embedding_evidence(reference: Any, candidate: Any, *, k: int = 10,
                       ref_gallery: Any = None, cand_gallery: Any = None,
                       gallery: dict[str, Any] | None = None) -> dict[str, Any]:
    """Cosine and retrieval agreement of ``candidate`` embeddings vs FP32, for the record.

    Retrieval (recall@k of FP32's neighbours, top-1 neighbour agreement) is measured in the
    gallery (``ref_gallery`` / ``cand_gallery``: the gallery embedded by each model;
    ``gallery``: what identifies it, recorded as is); without one it is left out."""
    cos = cosine_per_example(reference, candidate)
    out: dict[str, Any] = {"cosine": distribution(cos, lo=min(float(cos.min()), 0.9), hi=1.0)}
    if ref_gallery is None or cand_gallery is None:
        out["note"] = f"recall@{k} needs a gallery (none: the train split is empty)"
        return out
    size = int(np.asarray(ref_gallery).shape[0])
    if size < k:
        out["note"] = f"recall@{k} needs a gallery of at least {k} examples (got {size})"
    else:
        rec = gallery_recall_at_k(reference, candidate, ref_gallery, cand_gallery, k=k)
        out[f"recall_at_{k}"] = distribution(rec, bins=k, lo=0.0, hi=1.0)
        out["top1_neighbour_agreement"] = float(gallery_top1_agreement(
            reference, candidate, ref_gallery, cand_gallery).mean())
    out["gallery"] = {"size": size, **(gallery or {})}
    return out
