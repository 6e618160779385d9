"""Embedding evidence: cosine per example, mean pooling, recall@k of FP32's neighbours (in a
fixed gallery: its value does not depend on how many queries are evaluated)."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.compare import embedding
from quantkit.compare.embedding import (cosine_per_example, distribution, embedding_evidence,
                                        gallery_recall_at_k, gallery_top1_agreement,
                                        neighbour_recall_at_k,
                                        top1_neighbour_agreement)
from quantkit.data.feeds import mean_pool
from quantkit.errors import DataError


def test_mean_pool_ignores_padding():
    rng = np.random.default_rng(0)
    h = rng.normal(size=(3, 5, 4))
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    pooled = mean_pool(h, mask)
    assert np.allclose(pooled[0], h[0, :3].mean(axis=0))
    assert np.allclose(pooled[2], h[2, 0])
    h2 = h.copy()
    h2[0, 3:] = 1e6  # padded positions may hold anything
    assert np.allclose(mean_pool(h2, mask), pooled)


def test_mean_pool_shape_errors():
    with pytest.raises(DataError, match="tokens"):
        mean_pool(np.zeros((2, 3)))
    with pytest.raises(DataError, match="mask"):
        mean_pool(np.zeros((2, 3, 4)), np.ones((2, 4)))


def test_cosine_known_values():
    r = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.0, 2.0]])
    c = np.array([[2.0, 0.0], [0.0, 3.0], [0.0, 0.0], [1.0, 0.0], [-1.0, -1.0]])
    assert np.allclose(cosine_per_example(r, c), [1.0, 0.0, 1.0, 0.0, -1.0])


def test_recall_identical_is_one_and_shuffled_is_low():
    rng = np.random.default_rng(1)
    e = rng.normal(size=(200, 16))
    assert np.all(neighbour_recall_at_k(e, e, k=5) == 1.0)
    assert np.all(top1_neighbour_agreement(e, e) == 1.0)
    other = rng.normal(size=(200, 16))
    assert neighbour_recall_at_k(e, other, k=5).mean() < 0.2


def test_recall_hand_computed():
    # points on a line: neighbours of 0 are 1 then 2; candidate moves point 2 next to point 0
    ref = np.array([[1.0, 0.0], [1.0, 0.1], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]])
    cand = ref.copy()
    cand[3] = [1.0, -0.05]  # now the closest to 0
    rec = neighbour_recall_at_k(ref, cand, k=2)
    # query 0: FP32 top2 {1, 2}; candidate top2 {3, 1} -> 1 of 2
    assert rec[0] == pytest.approx(0.5)
    assert top1_neighbour_agreement(ref, cand)[0] == 0.0


def test_high_cosine_can_hide_changed_neighbours():
    """The reason recall@k exists: cosine > 0.99 to FP32, yet neighbours change."""
    rng = np.random.default_rng(2)
    centers = rng.normal(size=(20, 32))
    ref = np.repeat(centers, 30, axis=0) + 0.02 * rng.normal(size=(600, 32))
    cand = ref + 0.02 * rng.normal(size=ref.shape)
    cos = cosine_per_example(ref, cand)
    rec = neighbour_recall_at_k(ref, cand, k=10)
    assert cos.mean() > 0.99
    assert rec.mean() < 0.8


def test_chunking_does_not_change_neighbours():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(97, 8)), rng.normal(size=(97, 8))
    assert np.array_equal(neighbour_recall_at_k(a, b, k=7, chunk=10),
                          neighbour_recall_at_k(a, b, k=7, chunk=1000))


def test_recall_k_out_of_range_is_one_clear_error():
    with pytest.raises(DataError, match="recall@k") as e:
        neighbour_recall_at_k(np.ones((5, 2)), np.ones((5, 2)), k=5)
    assert "verdict.recall_k" in str(e.value)


def test_evidence_and_distribution():
    rng = np.random.default_rng(4)
    ref = rng.normal(size=(50, 8))
    gal = rng.normal(size=(30, 8))
    noise = lambda a: a + 0.01 * rng.normal(size=a.shape)  # noqa: E731
    ev = embedding_evidence(ref, noise(ref), k=5, ref_gallery=gal, cand_gallery=noise(gal),
                            gallery={"sha256": "ab" * 32, "source": "train"})
    assert 0.99 < ev["cosine"]["mean"] <= 1.0
    assert sum(ev["cosine"]["hist"]["counts"]) == 50
    assert 0.0 <= ev["recall_at_5"]["mean"] <= 1.0 and ev["recall_at_5"]["n"] == 50
    assert ev["gallery"] == {"size": 30, "sha256": "ab" * 32, "source": "train"}
    no_gallery = embedding_evidence(ref, ref, k=5)
    assert "note" in no_gallery and "recall_at_5" not in no_gallery
    small = embedding_evidence(ref, ref, k=5, ref_gallery=gal[:4], cand_gallery=gal[:4])
    assert "note" in small and "recall_at_5" not in small
    d = distribution([1.0, 1.0, 1.0])
    assert d["mean"] == 1.0 and d["n"] == 3


def _clustered(rng, n, centers):
    return centers[rng.integers(0, len(centers), n)] + 0.05 * rng.normal(size=(n, 16))


def test_gallery_recall_of_a_query_does_not_depend_on_the_other_queries():
    """Issue 24: recall@k searched inside the evaluated set, so one candidate scored 0.906 /
    0.955 / 0.890 at n = 1,000 / 2,500 / 6,000. Against a fixed gallery a query's recall is
    the same whichever other queries are evaluated with it."""
    rng = np.random.default_rng(5)
    centers = rng.normal(size=(40, 16))
    gal, queries = _clustered(rng, 500, centers), _clustered(rng, 3000, centers)
    cand = lambda a: a + 0.03 * rng.normal(size=a.shape)  # noqa: E731
    gal_c, q_c = cand(gal), cand(queries)
    full = gallery_recall_at_k(queries, q_c, gal, gal_c, k=10)
    for n in (100, 1000):
        idx = np.sort(rng.choice(3000, n, replace=False))
        sub = gallery_recall_at_k(queries[idx], q_c[idx], gal, gal_c, k=10)
        assert np.array_equal(sub, full[idx])  # per query: identical
        assert abs(sub.mean() - full.mean()) < 4 * full.std() / np.sqrt(n)
    # the within-set recall of the same queries moves with n: more neighbours to confuse
    within = [neighbour_recall_at_k(queries[:n], q_c[:n], k=10).mean() for n in (100, 3000)]
    assert abs(within[0] - within[1]) > 0.05
    assert np.array_equal(gallery_recall_at_k(queries, q_c, gal, gal_c, k=10, chunk=7), full)


def test_gallery_recall_hand_computed_and_errors():
    gal = np.array([[1.0, 0.0], [1.0, 0.1], [1.0, 0.3], [0.0, 1.0]])
    q = np.array([[1.0, 0.05]])
    gal_c = gal.copy()
    gal_c[3] = [1.0, 0.06]  # the candidate moves gallery item 3 next to the query
    assert gallery_recall_at_k(q, q, gal, gal, k=2)[0] == 1.0
    assert gallery_recall_at_k(q, q, gal, gal_c, k=2)[0] == pytest.approx(0.5)
    assert gallery_top1_agreement(q, q, gal, gal_c)[0] == 0.0
    with pytest.raises(DataError, match="gallery size") as e:
        gallery_recall_at_k(q, q, gal, gal, k=5)
    assert "verdict.recall_k" in str(e.value)
    with pytest.raises(DataError, match="one shape"):
        gallery_recall_at_k(q, q, gal, gal[:3], k=2)


@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_the_partitioned_top_k_is_the_stable_sort_s_top_k(decimals):
    rng = np.random.default_rng(3)
    sim = rng.standard_normal((64, 200))
    if decimals is not None:  # ties, also at the k-th value
        sim = np.round(sim, decimals)
    for k in (1, 10, 200):
        assert np.array_equal(embedding._ranked_topk(sim, k),
                              np.argsort(-sim, axis=1, kind="stable")[:, :k])
