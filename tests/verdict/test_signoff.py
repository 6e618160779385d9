"""One candidate's sign-off test: honest intervals, groups, churn, agreement, power."""

import json
import math

import numpy as np
import pytest

from quantkit.errors import ConfigError, DataError
from quantkit.verdict import (FAIL, INCONCLUSIVE, PASS, Margin, TestPolicy, agreement_signoff,
                              churn_gate,
                              intra_group_correlation, paired_signoff, plan_power,
                              required_agreement_size, required_test_size, with_gate)
from quantkit.verdict.cluster import group_codes

M = Margin("relative", 0.01)


def _mc_bound(rate, sims):
    return rate + 3 * math.sqrt(rate * (1 - rate) / sims)


def _paired(rng, n, *, p_ref=0.8, p_b=0.03, p_c=0.03):
    """Correctness pairs with P(ref only right) = p_b and P(cand only right) = p_c."""
    ref = rng.random(n) < p_ref
    u = rng.random(n)
    cand = np.where(ref, u >= p_b / p_ref, u < p_c / (1 - p_ref))
    return ref, cand


# --------------------------------------------------------------------------- few examples


def test_ten_identical_predictions_cannot_pass():
    right = np.array([True] * 8 + [False] * 2)
    for min_n in (100, 1):  # the size floor, and the score interval on its own
        t = paired_signoff(right, right, margin=M, policy=TestPolicy(min_n=min_n))
        assert t.status == INCONCLUSIVE and not t
        assert t.low < -0.2 and t.methods["bootstrap"]["low"] == 0.0  # the bootstrap alone: 0
    t = paired_signoff(right, right, margin=M)
    assert any("verdict.min_n=100" in r for r in t.reasons) and t.plan_n > 10
    agree = agreement_signoff(np.arange(10), np.arange(10), min_agreement=0.99,
                              policy=TestPolicy(min_n=1))
    assert agree.status == INCONCLUSIVE and agree.low < 0.8


def test_decisions_at_large_n():
    rng = np.random.default_rng(0)
    ref, cand = _paired(rng, 8000, p_b=0.02, p_c=0.02)
    assert paired_signoff(ref, cand, margin=M).status == PASS
    ref, cand = _paired(rng, 8000, p_b=0.05, p_c=0.02)
    t = paired_signoff(ref, cand, margin=M, candidate="int8")
    assert t.status == FAIL and t.high < t.threshold and t.plan_n is None
    d = json.loads(json.dumps(t.to_dict()))
    assert d["candidate"] == "int8" and d["alpha_one_sided"] == 0.025 and d["level"] == 0.95
    assert d["methods"]["score"]["method"] == "tango"
    assert d["methods"]["bootstrap"]["method"] == "iid"
    # the decision interval is the envelope of the two methods
    assert t.low == min(t.methods["score"]["low"], t.methods["bootstrap"]["low"])


def test_false_pass_rate_at_the_margin_is_at_most_one_sided_alpha():
    rng = np.random.default_rng(1)
    sims, n, m = 1500, 2500, 0.0077
    passes = 0
    for i in range(sims):
        ref, cand = _paired(rng, n, p_ref=0.77, p_b=0.04, p_c=0.04 - m)
        passes += paired_signoff(ref, cand, margin=Margin("absolute", m),
                                 policy=TestPolicy(n_boot=500, seed=i)).status == PASS
    assert passes / sims <= _mc_bound(0.025, sims), passes / sims


# --------------------------------------------------------------------------- groups


def _planted_group_regression(seed=0):
    """60 movies x 100 reviews; the candidate breaks on movie 0 (loses 50 of its 100) and
    is slightly better elsewhere, so the overall delta is small (-0.002)."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(60), 100)
    ref = rng.random(groups.size) < 0.85
    cand = ref.copy()
    for g in range(1, 60):  # symmetric 2% flips elsewhere
        idx = np.flatnonzero(groups == g)
        cand[idx[rng.random(idx.size) < 0.02]] ^= True
    zero = np.flatnonzero((groups == 0) & ref)[:50]
    cand[zero] = False
    gains = np.flatnonzero((groups > 0) & ~cand)
    cand[rng.choice(gains, 38 - int(np.sum(cand[groups > 0]) - np.sum(ref[groups > 0])),
                    replace=False)] = True
    return ref, cand, groups


def test_planted_regression_in_one_group_passes_only_without_the_cluster_bootstrap():
    ref, cand, groups = _planted_group_regression()
    iid = paired_signoff(ref, cand, margin=M)
    grouped = paired_signoff(ref, cand, margin=M, groups=groups)
    assert abs(iid.point + 0.002) < 0.001 and grouped.point == iid.point
    assert iid.status == PASS  # examples treated as independent: too narrow
    assert grouped.status != PASS  # groups resampled: the movie-0 regression shows
    assert grouped.methods["bootstrap"]["method"] == "cluster_t"
    assert grouped.low < grouped.threshold < iid.low
    g = grouped.groups
    assert g["n_groups"] == 60 and g["icc"] > 0.05 and g["design_effect"] > 3
    assert any("intra-group correlation" in r for r in grouped.reasons)


def test_icc_estimates_a_known_group_effect():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(400), 25)
    effect = rng.normal(0, math.sqrt(0.2), 400)[groups]  # ICC = 0.2 / (0.2 + 0.8)
    y = effect + rng.normal(0, math.sqrt(0.8), groups.size)
    codes, g = group_codes(groups, y.size, "test")
    st = intra_group_correlation(y, codes, g)
    assert abs(st.icc - 0.2) < 0.04 and abs(st.design_effect - (1 + 24 * st.icc)) < 1e-9
    st = intra_group_correlation(rng.normal(size=groups.size), codes, g)
    assert abs(st.icc) < 0.03 and st.design_effect >= 1.0
    with pytest.raises(DataError, match="one group key per example"):
        paired_signoff(np.ones(5, bool), np.ones(5, bool), margin=M, groups=[1, 2])


def test_grouped_false_pass_rate_holds_with_groups_and_not_without():
    """Correlated losses within movies, true delta = -margin: the cluster verdict keeps
    alpha; treating examples as independent does not."""
    rng = np.random.default_rng(5)
    sims, n_groups, size, m = 400, 80, 40, 0.0077
    groups = np.repeat(np.arange(n_groups), size)
    passes = {"cluster": 0, "iid": 0}
    for i in range(sims):
        ref = rng.random(groups.size) < 0.8
        loss = rng.exponential(0.04, n_groups)[groups]  # per-movie loss rate, mean 0.04
        gain = 0.04 - m
        u = rng.random(groups.size)
        cand = np.where(ref, u >= loss / 0.8, u < gain / 0.2)
        passes["cluster"] += paired_signoff(ref, cand, margin=Margin("absolute", m),
                                            groups=groups, policy=TestPolicy(n_boot=500, seed=i)
                                            ).status == PASS
        passes["iid"] += paired_signoff(ref, cand, margin=Margin("absolute", m),
                                        policy=TestPolicy(n_boot=500, seed=i)).status == PASS
    assert passes["cluster"] / sims <= _mc_bound(0.025, sims), passes
    assert passes["iid"] / sims > _mc_bound(0.025, sims), passes  # too many false PASSes


def test_too_few_groups_is_inconclusive():
    rng = np.random.default_rng(6)
    ref, cand = _paired(rng, 20_000, p_b=0.01, p_c=0.01)
    t = paired_signoff(ref, cand, margin=M, groups=np.arange(20_000) % 5)
    assert t.status == INCONCLUSIVE and any("verdict.min_groups=75" in r for r in t.reasons)


# --------------------------------------------------------------------------- churn, agreement


def test_ten_percent_flips_with_equal_accuracy_fail_the_churn_gate():
    rng = np.random.default_rng(7)
    n = 20_000
    y = rng.integers(0, 4, n)
    ref = np.where(rng.random(n) < 0.8, y, (y + 1) % 4)
    cand = ref.copy()
    # 5% of examples turn right -> wrong and 5% wrong -> right: 10% flips, equal accuracy
    right = rng.permutation(np.flatnonzero(ref == y))[:n // 20]
    wrong = rng.permutation(np.flatnonzero(ref != y))[:n // 20]
    cand[right] = (y[right] + 2) % 4
    cand[wrong] = y[wrong]
    acc = paired_signoff(ref == y, cand == y, margin=M)
    assert acc.status == PASS and abs(acc.point) < 1e-9  # accuracy alone would pass it
    gate = churn_gate(ref, cand, max_flip_rate=0.05)
    assert gate.status == FAIL and gate.flip_rate > 0.05 and 1 - gate.high > 0.05
    joined = with_gate(acc, gate)
    assert joined.status == FAIL and joined.gate["status"] == FAIL
    assert "churn gate FAIL" in joined.reasons[-1] and "PASS becomes FAIL" in joined.reasons[-1]
    # a low-churn candidate passes the same gate
    few = ref.copy()
    few[right[:20]] = (y[right[:20]] + 2) % 4
    assert churn_gate(ref, few, max_flip_rate=0.05).status == PASS
    assert with_gate(paired_signoff(ref == y, few == y, margin=M),
                     churn_gate(ref, few, max_flip_rate=0.05)).status == PASS


def test_label_free_agreement_verdict():
    rng = np.random.default_rng(8)
    ref = rng.integers(0, 10, 20_000)
    close = np.where(rng.random(ref.size) < 0.003, (ref + 1) % 10, ref)  # 99.7% agreement
    far = np.where(rng.random(ref.size) < 0.02, (ref + 1) % 10, ref)  # 98%
    assert agreement_signoff(ref, close, min_agreement=0.99).status == PASS
    t = agreement_signoff(ref, far, min_agreement=0.99)
    assert t.status == FAIL and t.metric == "agreement" and t.threshold == 0.99
    mid = np.where(rng.random(2000) < 0.009, (ref[:2000] + 1) % 10, ref[:2000])
    t = agreement_signoff(ref[:2000], mid, min_agreement=0.99)
    assert t.status == INCONCLUSIVE
    assert t.plan_n is None or t.plan_n > 2000
    with pytest.raises(ConfigError, match="verdict.min_agreement"):
        agreement_signoff(ref, ref, min_agreement=1.0)
    with pytest.raises(ConfigError, match="verdict.max_flip_rate"):
        churn_gate(ref, ref, max_flip_rate=0)


# --------------------------------------------------------------------------- power


def test_planned_size_gives_the_planned_power():
    m, p_b, p_c = 0.008, 0.025, 0.025  # lossless candidate, 5% flips
    n = required_test_size(flip_rate=p_b + p_c, delta=0.0, margin_abs=m, alpha=0.025, power=0.8)
    assert 5000 < n < 7000
    rng = np.random.default_rng(9)
    sims = 500
    passes = sum(paired_signoff(*_paired(rng, n, p_b=p_b, p_c=p_c),
                                margin=Margin("absolute", m),
                                policy=TestPolicy(n_boot=500, seed=i)).status == PASS
                 for i in range(sims))
    assert 0.73 <= passes / sims <= 0.87, passes / sims
    # larger effects, fewer flips, less power: monotone; no size at delta <= -margin
    assert required_test_size(flip_rate=0.05, delta=-0.004, margin_abs=m) > n
    assert required_test_size(flip_rate=0.02, delta=0.0, margin_abs=m) < n
    assert required_test_size(flip_rate=0.05, delta=0.0, margin_abs=m, power=0.9) > n
    assert required_test_size(flip_rate=0.05, delta=-m, margin_abs=m) is None
    assert required_test_size(flip_rate=0.05, delta=0.0, margin_abs=m, design_effect=2.0) \
        == pytest.approx(2 * n, abs=2)


def test_plan_power_from_dev_uses_min_of_dev_delta_and_zero():
    rng = np.random.default_rng(10)
    ref, cand = _paired(rng, 3000, p_b=0.02, p_c=0.03)  # dev says the candidate is better
    dev = paired_signoff(ref, cand, margin=M, candidate="int8")
    plan = plan_power(dev, n_available=6000)
    assert plan.planned_effect == 0.0 and plan.basis == "dev"
    assert plan.n_required == required_test_size(flip_rate=dev.flip_rate, delta=0.0,
                                                 margin_abs=-dev.threshold, alpha=0.025)
    assert plan.adequate == (6000 >= plan.n_required) and "test split has 6000" in plan.reason
    assert json.loads(json.dumps(plan.to_dict()))["adequate"] == plan.adequate
    n = required_agreement_size(agreement=0.997, min_agreement=0.99)
    assert 500 < n < 5000 and required_agreement_size(agreement=0.99, min_agreement=0.99) is None


def test_signoff_test_feeds_the_search_and_the_verdict_shaped_record():
    from quantkit.precision.fp16_search import EvalResult

    rng = np.random.default_rng(11)
    t = paired_signoff(*_paired(rng, 5000, p_b=0.02, p_c=0.02), margin=M, candidate="mixed")
    v = json.loads(json.dumps(t.to_verdict_dict()))
    assert v["status"] == t.status and v["deltas"]["accuracy"]["low"] == t.low
    assert v["alpha"] == 0.05 and v["signoff"]["alpha_one_sided"] == 0.025
    ev = EvalResult.from_verdict(t, seconds=1.5)
    assert ev.status == t.status and ev.interval == (t.low, t.high) and ev.metric == t.point


def test_churn_interval_for_every_candidate():
    from quantkit.verdict import churn

    rng = np.random.default_rng(12)
    ref = rng.integers(0, 3, 5000)
    cand = np.where(rng.random(5000) < 0.06, (ref + 1) % 3, ref)
    ch = churn(ref, cand)
    assert ch.flipped == int(np.sum(ref != cand)) and ch.flip_rate == ch.flipped / 5000
    assert ch.flip_low < 0.06 < ch.flip_high and ch.level == 0.95
    groups = np.repeat(np.arange(50), 100)
    grouped = churn(ref, cand, groups=groups)
    assert grouped.groups["n_groups"] == 50 and "cluster" in grouped.method
    same = churn(ref, ref)
    assert same.flip_rate == 0.0 and same.flip_high > 0.0  # never a zero-width interval


def test_one_flip_in_thousands_of_grouped_examples_is_a_tight_interval():
    """bert_int8's fp16 on test (6,389 reviews of 256 movies, 1 changed prediction): the
    cluster bootstrap-t must not read the ~37% of resamples that miss the lone flip's group
    (no spread at all) as t = -1e6; it gave the churn gate a flip-rate bound of 156 and made
    a near-perfect candidate INCONCLUSIVE."""
    rng = np.random.default_rng(3)
    n, g = 6389, 256
    groups = rng.integers(0, g, n)
    ref = rng.random(n) < 0.75
    cand = ref.copy()
    cand[17] = not cand[17]  # one changed prediction
    t = paired_signoff(ref, cand, margin=Margin("relative", 0.005),
                       groups=groups, policy=TestPolicy(alpha=0.0225))
    assert t.status == PASS, t.reasons
    assert -1.0 <= t.low <= t.high <= 0.01
    gate = churn_gate(ref.astype(int), cand.astype(int), max_flip_rate=0.02,
                      groups=groups, policy=TestPolicy(alpha=0.0225))
    assert gate.status == PASS, gate.reasons
    assert 1 - gate.low < 0.005  # the flip rate's upper bound: about 1 in 1,000, not 156
    # the bound still moves with the evidence: 150 flips in one group of a world with the
    # same size is not shown below 2%
    many = ref.copy()
    hit = np.flatnonzero(groups == 5)
    many[hit] = ~many[hit]
    wide = churn_gate(ref.astype(int), many.astype(int), max_flip_rate=0.02,
                      groups=groups, policy=TestPolicy(alpha=0.0225))
    assert wide.status != PASS
