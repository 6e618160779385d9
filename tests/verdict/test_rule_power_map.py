"""The power plan of the mAP sign-off (verdict/rule_power.py, outcome.plan_power): the normal
approximation of the paired image (group) bootstrap, from dev's spread of the margin
statistic, rises with the test size and the distance to the margin, and is 0 beyond it."""

from __future__ import annotations


from quantkit.verdict import TestPolicy
from quantkit.verdict.outcome import SignoffTest, plan_power
from quantkit.verdict.rule_power import plan_by_rule, rule_power


def _dev_test(point: float, *, sd: float = 0.01, n: int = 50, groups: int | None = None
              ) -> SignoffTest:
    return SignoffTest(
        candidate="int8", metric="map", status="INCONCLUSIVE", point=point, low=point - 0.02,
        high=point + 0.02, alpha=0.025, threshold=-0.0066, p_noninferiority=0.5,
        p_regression=0.5, n=n, ref_value=0.66, cand_value=0.66 + point, flip_rate=0.3,
        discordant={"images_changed": 15}, methods={"bootstrap": {"sd_of_d": sd}},
        groups=None if groups is None else {"n_groups": groups, "mean_group_size": n / groups,
                                            "icc": None, "design_effect": None},
        reasons=[], margin={"kind": "relative", "value": 0.01, "abs": 0.0066})


def test_power_rises_with_size_and_margin_distance():
    policy = TestPolicy(min_n=10, min_groups=2)
    near = _dev_test(-0.004)
    p100 = rule_power(near, n=100, policy=policy).power
    p400 = rule_power(near, n=400, policy=policy).power
    assert 0.0 < p100 < p400 <= 1.0
    assert rule_power(_dev_test(0.0), n=100, policy=policy).power > p100
    assert rule_power(_dev_test(-0.01), n=10_000, policy=policy).power < 1e-9
    assert "mAP bootstrap" in rule_power(near, n=100, policy=policy).method


def test_grouped_plan_counts_groups_and_reports_images():
    policy = TestPolicy(min_n=10, min_groups=2, power=0.8)
    t = _dev_test(-0.002, groups=25)
    plan = plan_by_rule(t, n_available=100, policy=policy, n_groups=50)
    assert plan.n_required is not None and plan.n_required >= 10
    assert plan.extra["tested"] in (True, False)
    base = plan_power(t, n_available=100, policy=policy)
    assert base.metric == "map" and "groups" in base.reason
    assert base.n_required == plan.n_required  # the same model solved for n
