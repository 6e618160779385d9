"""Power planned for the decision rule actually used (quantkit/verdict/rule_power.py): the
planned power matches how often the real rule PASSes on independently drawn test splits,
the planned size gives the target power, and members below verdict.min_power drop out of
the family before the test split is touched."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from quantkit.verdict import (Margin, TestPolicy, churn_gate, declare_powered_family,
                              paired_signoff, with_gate)
from quantkit.verdict.rule_power import plan_by_rule, rule_power, rule_size

M = Margin("absolute", 0.01)


def _dev(n, p_b, p_c, *, seed, name, gate=True):
    """A candidate's dev test from per-example data (examples in random order)."""
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    ref = np.ones(n, bool)
    cand = np.ones(n, bool)
    ref[(u >= p_b) & (u < p_b + p_c)] = False  # only the candidate right
    cand[u < p_b] = False  # only FP32 right
    t = paired_signoff(ref, cand, margin=M, policy=TestPolicy(seed=seed), candidate=name)
    if gate:
        flips = (ref != cand).astype(np.int64)
        t = with_gate(t, churn_gate(np.zeros(n, np.int64), flips, max_flip_rate=0.1,
                                    policy=TestPolicy(seed=seed), candidate=name))
    return t


def _realized(n, p_b, p_c, *, sims, seed):
    """How often the rule itself (one-sided alpha 0.025) PASSes on independently drawn test
    splits of n examples."""
    return sum(_dev(n, p_b, p_c, seed=seed + s, name="x").status == "PASS"
               for s in range(sims)) / sims


def test_planned_power_matches_the_rule_on_independent_splits():
    dev = _dev(4000, 0.012, 0.012, seed=1, name="int8")
    n = 1500
    planned = rule_power(dev, n=n, policy=TestPolicy(n_boot=500, seed=0, sims=300))
    # independent test splits at dev's estimated cells, decided by the real rule
    f, d = dev.flip_rate, min(dev.point, 0.0)
    realized = _realized(n, (f - d) / 2, (f + d) / 2, sims=300, seed=1000)
    assert 0.15 < planned.power < 0.95  # an informative case, not a floor or ceiling
    assert abs(planned.power - realized) < 0.1, (planned.power, realized)
    assert "paired_signoff" in planned.method and "churn gate" in planned.method
    assert rule_power(dev, n=4 * n, policy=TestPolicy(n_boot=500, sims=300)).power > planned.power


def test_planned_size_gives_the_target_power_and_below_min_n_there_is_none():
    dev = _dev(4000, 0.012, 0.012, seed=2, name="int8")
    need = rule_size(dev, policy=TestPolicy(n_boot=500, sims=300))
    at = rule_power(dev, n=need, policy=TestPolicy(n_boot=500, seed=7, sims=400)).power
    assert abs(at - 0.8) < 0.08, (need, at)
    assert rule_power(dev, n=50, policy=TestPolicy(min_n=100)).power == 0.0
    losing = _dev(4000, 0.03, 0.005, seed=3, name="bad")  # dev delta far below -margin
    assert rule_size(losing, policy=TestPolicy()) is None


def test_an_underpowered_member_is_not_tested_and_the_plan_says_what_size_would_do():
    dev = _dev(4000, 0.012, 0.012, seed=4, name="int8")
    policy = TestPolicy(min_power=0.5, n_boot=300, sims=200)
    small = plan_by_rule(dev, n_available=300, policy=policy)
    assert small.extra["tested"] is False and small.extra["planned_power"] < 0.5
    assert "not tested" in small.reason and f"about {small.n_required}" in small.reason
    assert small.n_required > 300 and small.extra["n_required_formula"] is not None
    big = plan_by_rule(dev, n_available=20000, policy=policy)
    assert big.extra["tested"] is True and big.adequate


def test_the_family_keeps_only_members_worth_testing():
    dev = {"fp16": _dev(4000, 0.0, 0.0, seed=5, name="fp16"),
           "int8": _dev(4000, 0.012, 0.012, seed=6, name="int8"),
           "mixed": _dev(4000, 0.02, 0.004, seed=7, name="mixed")}  # loses > margin on dev
    policy = TestPolicy(alpha=0.0225, min_power=0.5, n_boot=300, seed=0)
    fam, plan = declare_powered_family(dev, n_test=2500, policy=policy)
    rows = {r["candidate"]: r for r in plan.rows}
    assert "mixed" not in fam.candidates and rows["mixed"]["tested"] is False
    assert set(fam.candidates) == {"fp16", "int8"} and rows["int8"]["tested"]
    assert fam.alpha == pytest.approx(0.0225)
    holm, hplan = declare_powered_family(dev, method="holm", n_test=2500, policy=policy)
    assert set(holm.candidates) == {"fp16", "int8"}
    assert all(r["alpha_one_sided"] == pytest.approx(0.0225 / 2) for r in hplan.rows
               if r["tested"])  # planned at the level of the family that is tested
    none, nplan = declare_powered_family({"mixed": dev["mixed"]}, n_test=2500, policy=policy)
    assert none is None and nplan.rows[0]["tested"] is False
    everyone, _ = declare_powered_family(dev, n_test=2500,
                                         policy=dataclasses.replace(policy, min_power=0.0))
    assert set(everyone.candidates) == set(dev)  # min_power 0: every member is tested


def test_zero_simulations_plan_with_the_analytic_approximation():
    dev = _dev(4000, 0.012, 0.012, seed=8, name="int8")
    analytic = TestPolicy(sims=0)
    fast = rule_power(dev, n=1500, policy=analytic)
    assert fast.sims == 0 and "analytic" in fast.method and 0.2 < fast.power < 0.95
    assert rule_size(dev, policy=analytic) == plan_by_rule(
        dev, n_available=1500, policy=analytic).extra["n_required_formula"]


def test_a_plan_beyond_the_largest_simulated_size_says_more_than_it():
    """A member whose dev delta sits just inside the margin needs more test examples than any
    sign-off set holds: the plan simulates up to N_MAX (not 10^7: one planned power there
    cost about 70 s) and says "more than N_MAX"; one comfortably inside stays exact."""
    from quantkit.verdict.rule_power import N_MAX

    policy = TestPolicy(n_boot=300, seed=0, sims=400)
    near = plan_by_rule(_dev(3000, 0.011, 0.002, seed=1, name="near"), n_available=1000,
                        policy=policy)
    assert near.n_required == N_MAX == 100_000
    assert f"more than {N_MAX} test examples needed" in near.reason
    inside = plan_by_rule(_dev(3000, 0.008, 0.006, seed=1, name="inside"), n_available=1000,
                          policy=policy)
    assert 1000 < inside.n_required < N_MAX and "about" in inside.reason
