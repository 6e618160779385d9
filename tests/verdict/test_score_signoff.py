"""score_signoff: label-free scores vs FP32 as the share of examples within a per-example
tolerance, with an exact binomial bound (issue 24); agreement stays the Wilson test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from quantkit.errors import ConfigError, DataError
from quantkit.verdict import TestPolicy, agreement_signoff, plan_power, score_signoff
from quantkit.verdict.score import clopper_pearson_interval, clopper_pearson_p_above


def test_binary_scores_are_exactly_the_agreement_test():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 3, 400)
    cand = np.where(rng.random(400) < 0.004, (ref + 1) % 3, ref)
    seeded = TestPolicy(seed=1)
    a = agreement_signoff(ref, cand, min_agreement=0.95, policy=seeded)
    s = score_signoff((ref == cand).astype(float), metric="agreement", threshold=0.95,
                      policy=seeded)
    assert (s.status, s.low, s.high, s.p_noninferiority) == \
        (a.status, a.low, a.high, a.p_noninferiority)
    with pytest.raises(DataError, match="0 or 1"):
        score_signoff(np.full(10, 0.5), metric="agreement", threshold=0.95)


def test_clopper_pearson_is_the_exact_binomial_bound():
    low, high = clopper_pearson_interval(97, 100, alpha=0.05)
    # the lower limit is the share p at which P(X >= 97 | p) = 0.025
    assert binom.sf(96, 100, low) == pytest.approx(0.025, abs=1e-9)
    assert binom.cdf(97, 100, high) == pytest.approx(0.025, abs=1e-9)
    assert clopper_pearson_p_above(97, 100, 0.9) == pytest.approx(binom.sf(96, 100, 0.9))
    assert clopper_pearson_interval(100, 100, alpha=0.05)[0] == pytest.approx(0.025 ** 0.01)


def test_cosine_share_pass_fail_and_inconclusive():
    rng = np.random.default_rng(1)
    good = np.clip(1 - np.abs(rng.normal(0, 0.002, 500)), -1, 1)  # ~100% >= 0.99
    bad = np.clip(1 - np.abs(rng.normal(0, 0.05, 500)), -1, 1)  # ~16% >= 0.99
    t_good = score_signoff(good, metric="cosine", threshold=0.99)
    t_bad = score_signoff(bad, metric="cosine", threshold=0.99)
    assert t_good.status == "PASS" and t_good.low > 0.95
    assert t_bad.status == "FAIL" and t_bad.high < 0.95
    assert t_good.methods["score"]["method"] == "clopper_pearson"
    assert t_good.margin == {"quantile": 0.05, "bound": 0.99, "min_share": 0.95,
                             "higher_is_better": True, "kind": "proportion",
                             "test": "exact binomial share"}
    # 26 of 500 outside (5.2%): the share 0.948 is at the declared 0.95
    near = np.where(np.arange(500) < 26, 0.9, 0.999)
    t = score_signoff(near, metric="cosine", threshold=0.99)
    assert t.status == "INCONCLUSIVE" and t.low < 0.95 < t.high
    assert t.point == pytest.approx(474 / 500) and t.discordant == {"outside": 26}


def test_all_equal_scores_never_give_a_zero_width_interval():
    for value, metric, bound in ((1.0, "cosine", 0.99), (0.0, "kl", 0.01),
                                 (0.5, "kl", 0.01), (1.0, "recall_at_k", 0.9)):
        t = score_signoff(np.full(200, value), metric=metric, threshold=bound,
                          policy=TestPolicy(min_n=1))
        assert t.high - t.low > 0.01, (value, metric)
    # 10 identical embeddings cannot pass; 100 cannot either at a 0.99 share
    assert score_signoff(np.ones(10), metric="cosine", threshold=0.99,
                         policy=TestPolicy(min_n=1)).status == "INCONCLUSIVE"
    t = score_signoff(np.ones(100), metric="cosine", threshold=0.99, quantile=0.01)
    assert t.status == "INCONCLUSIVE" and t.low == pytest.approx(0.025 ** 0.01)


def test_kl_ceiling_is_a_per_example_tolerance():
    rng = np.random.default_rng(2)
    small = rng.exponential(0.001, 400)  # 99.99% below 0.01
    big = rng.exponential(0.05, 400)  # 18% below 0.01
    t = score_signoff(small, metric="kl", threshold=0.01)
    assert t.status == "PASS" and t.margin["bound"] == 0.01
    assert t.margin["higher_is_better"] is False
    t2 = score_signoff(big, metric="kl", threshold=0.01)
    assert t2.status == "FAIL" and t2.high < 0.95
    assert "<= 0.01" in t.reasons[0] and "exact Clopper-Pearson" in t.reasons[0]


def test_the_share_test_catches_what_the_mean_hides():
    rng = np.random.default_rng(3)
    cos = np.clip(1 - np.abs(rng.normal(0, 0.002, 600)), -1, 1)
    cos[:60] = 0.9  # 10% of the examples far off: mean 0.989, 90% within
    q = score_signoff(cos, metric="cosine", threshold=0.98, quantile=0.05)
    assert q.status == "FAIL" and abs(q.point - 0.9) < 1e-9
    assert q.methods["score"]["score_mean"] == pytest.approx(cos.mean())
    assert q.margin["quantile"] == 0.05 and q.margin["bound"] == 0.98


def test_groups_use_rao_scott_and_the_cluster_bootstrap_t():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(40), 10)
    bad_group = np.isin(groups, rng.choice(40, 3, replace=False))
    cos = np.where(bad_group & (rng.random(400) < 0.7), 0.95, 0.999)
    iid = score_signoff(cos, metric="cosine", threshold=0.99)
    grouped = score_signoff(cos, metric="cosine", threshold=0.99, groups=groups)
    assert grouped.design_effect > 1.5
    assert (grouped.high - grouped.low) > (iid.high - iid.low)
    assert grouped.methods["bootstrap"]["method"] == "cluster_t"
    assert grouped.methods["score"]["method"] == "clopper_pearson_rao_scott"


def test_power_plan_of_a_share():
    rng = np.random.default_rng(5)
    cos = np.where(rng.random(300) < 0.02, 0.9, 0.999)
    t = score_signoff(cos, metric="cosine", threshold=0.99)
    plan = plan_power(t, n_available=300)
    assert plan.n_required is not None and plan.n_required > 100
    assert "share of examples within the cosine tolerance" in plan.reason


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="verdict.min_cosine"):
        score_signoff(np.ones(5), metric="cosine", threshold=1.5)
    with pytest.raises(ConfigError, match="verdict.max_kl"):
        score_signoff(np.ones(5), metric="kl", threshold=0.0)
    with pytest.raises(ConfigError, match="verdict.score_quantile"):
        score_signoff(np.ones(5), metric="cosine", threshold=0.9, quantile=1.0)
    with pytest.raises(ConfigError, match="score_quantile=null"):
        score_signoff(np.ones(5), metric="kl", threshold=0.01, quantile=None)
