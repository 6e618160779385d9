"""The mixed search's dev halves (quantkit/run/dev_halves.py) on the tiny world."""

from __future__ import annotations

import dataclasses

import numpy as np

from quantkit.record.serde import encode
from quantkit.run.dev_halves import dev_halves
from quantkit.run.sensitivity import half_test


def _with_min_n(ctx, min_n: int):
    v = dataclasses.replace(ctx.settings.verdict, min_n=min_n)
    return dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, verdict=v))


def test_a_dev_split_too_small_for_two_halves_is_read_whole(ctx):
    n = len(ctx.splits.dev)
    h = dev_halves(_with_min_n(ctx, n))  # two halves of n examples each cannot exist
    assert not h.split and h.selection is None and h.confirmation is None
    assert f"dev has {n} examples" in h.reason and f"{2 * n} examples" in h.reason
    assert h.to_record().split is False


def test_halves_are_seeded_disjoint_and_cover_dev(ctx):
    c = _with_min_n(ctx, 2)
    n = len(c.splits.dev)
    h = dev_halves(c)
    assert h.split and abs(len(h.selection) - len(h.confirmation)) <= 1
    assert not set(h.selection.tolist()) & set(h.confirmation.tolist())
    assert sorted(h.selection.tolist() + h.confirmation.tolist()) == list(range(n))
    again = dev_halves(c)
    np.testing.assert_array_equal(again.selection, h.selection)
    other = dev_halves(dataclasses.replace(
        c, settings=dataclasses.replace(c.settings, seed=c.settings.seed + 1)))
    assert not np.array_equal(other.selection, h.selection)
    assert encode(h.to_record()) == {"split": True, "reason": h.reason,
                             "selection_n": len(h.selection),
                             "confirmation_n": len(h.confirmation)}


def test_a_half_test_is_the_paired_test_on_those_rows(ctx, evaluations, reference):
    ev = evaluations["int8.minmax"]
    whole = half_test(ctx, ev, reference, np.arange(len(ctx.splits.dev)), gallery=None)
    assert whole.to_verdict_dict() == ev.test.to_verdict_dict()
    h = dev_halves(_with_min_n(ctx, 2))
    part = half_test(ctx, ev, reference, h.selection, gallery=None)
    assert part.n == len(h.selection)
    y = ctx.splits.dev.labels[h.selection]
    ref_ok = reference.logits[h.selection].argmax(1) == y
    cand_ok = ev.logits[h.selection].argmax(1) == y
    assert part.ref_value == ref_ok.mean() and part.cand_value == cand_ok.mean()
    assert part.flip_rate == np.mean(ref_ok != cand_ok)
