"""score_signoff: one implementation for every label-free per-example score vs FP32."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.errors import ConfigError
from quantkit.verdict import (agreement_signoff, plan_power, required_score_size,
                              score_signoff)


def test_binary_scores_are_exactly_the_agreement_test():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 3, 400)
    cand = np.where(rng.random(400) < 0.004, (ref + 1) % 3, ref)
    a = agreement_signoff(ref, cand, min_agreement=0.95, seed=1)
    s = score_signoff((ref == cand).astype(float), metric="agreement", threshold=0.95, seed=1)
    assert (s.status, s.low, s.high, s.p_noninferiority) == \
        (a.status, a.low, a.high, a.p_noninferiority)


def test_cosine_floor_pass_fail_and_inconclusive():
    rng = np.random.default_rng(1)
    good = np.clip(1 - np.abs(rng.normal(0, 0.002, 500)), -1, 1)
    bad = np.clip(1 - np.abs(rng.normal(0, 0.05, 500)), -1, 1)  # mean ~0.96
    t_good = score_signoff(good, metric="cosine", threshold=0.99)
    t_bad = score_signoff(bad, metric="cosine", threshold=0.99)
    assert t_good.status == "PASS" and t_good.low > 0.99
    assert t_bad.status == "FAIL" and t_bad.high < 0.99
    assert t_good.methods["score"]["method"] == "student_t"
    near = 0.9901 + rng.normal(0, 0.003, 500)  # at the floor: the interval straddles it
    assert near.max() < 1.0
    assert score_signoff(near, metric="cosine", threshold=0.99).status == "INCONCLUSIVE"


def test_ten_identical_embeddings_cannot_pass():
    t = score_signoff(np.ones(10), metric="cosine", threshold=0.99, min_n=1)
    assert t.status != "PASS" and t.low < 0.99  # Wilson on all-ones: honest width
    assert score_signoff(np.ones(10), metric="cosine", threshold=0.5).status == "INCONCLUSIVE"


def test_kl_ceiling_uses_the_upper_bound():
    rng = np.random.default_rng(2)
    small = rng.exponential(0.002, 400)
    big = rng.exponential(0.05, 400)
    t = score_signoff(small, metric="kl", threshold=0.01)
    assert t.status == "PASS" and t.high < 0.01 and t.margin["ceiling"] == 0.01
    t2 = score_signoff(big, metric="kl", threshold=0.01)
    assert t2.status == "FAIL" and t2.low > 0.01
    assert "upper bound" in t.reasons[0]


def test_quantile_tests_the_share_within_the_bound():
    rng = np.random.default_rng(3)
    cos = np.clip(1 - np.abs(rng.normal(0, 0.002, 600)), -1, 1)
    cos[:60] = 0.9  # 10% of the examples far off: the mean passes, the 5% quantile does not
    assert score_signoff(cos, metric="cosine", threshold=0.98).status == "PASS"
    q = score_signoff(cos, metric="cosine", threshold=0.98, quantile=0.05)
    assert q.status == "FAIL" and abs(q.point - 0.9) < 1e-9
    assert q.margin["quantile"] == 0.05 and q.margin["bound"] == 0.98


def test_groups_widen_the_interval():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(40), 10)
    offsets = rng.normal(0, 0.004, 40)[groups]
    cos = np.clip(0.995 + offsets + rng.normal(0, 0.001, 400), -1, 1)
    iid = score_signoff(cos, metric="cosine", threshold=0.99)
    grouped = score_signoff(cos, metric="cosine", threshold=0.99, groups=groups)
    assert grouped.design_effect > 1.5
    assert (grouped.high - grouped.low) > (iid.high - iid.low)
    assert grouped.methods["bootstrap"]["method"] == "cluster"


def test_power_plan_of_a_continuous_score():
    rng = np.random.default_rng(5)
    cos = np.clip(0.993 + rng.normal(0, 0.01, 300), -1, 1)
    t = score_signoff(cos, metric="cosine", threshold=0.99)
    plan = plan_power(t, n_available=300)
    sd = t.methods["score"]["sd"]
    assert plan.n_required == required_score_size(mean=t.point, threshold=0.99, sd=sd)
    assert plan.n_required > 100 and "sd" in plan.reason
    assert required_score_size(mean=0.98, threshold=0.99, sd=0.01) is None
    assert required_score_size(mean=0.005, threshold=0.01, sd=0.004,
                               higher_is_better=False) > 2


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="verdict.min_cosine"):
        score_signoff(np.ones(5), metric="cosine", threshold=1.5)
    with pytest.raises(ConfigError, match="verdict.max_kl"):
        score_signoff(np.ones(5), metric="kl", threshold=0.0)
    with pytest.raises(ConfigError, match="verdict.score_quantile"):
        score_signoff(np.ones(5), metric="cosine", threshold=0.9, quantile=1.0)
