"""macro_f1_signoff: verdict.metric=macro_f1 is signed off as the macro-F1 difference
(issue 24, point 2), never silently as accuracy."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from quantkit.errors import DataError
from quantkit.verdict import Margin, paired_signoff, plan_power
from quantkit.verdict.macro_f1 import macro_f1_signoff

MARGIN = Margin("relative", 0.01)


def planted(k: int = 400):
    """Accuracy unchanged, macro-F1 down: the candidate fixes k majority-class errors and
    loses k minority-class hits (10,000 examples, 20% minority)."""
    n0, n1, tp1, fp1 = 8000, 2000, 1100, 600
    y = np.r_[np.zeros(n0, int), np.ones(n1, int)]
    ref = np.r_[np.zeros(n0 - fp1, int), np.ones(fp1, int), np.ones(tp1, int),
                np.zeros(n1 - tp1, int)]
    cand = ref.copy()
    cand[n0 - fp1:n0 - fp1 + k] = 0  # k majority errors fixed
    cand[n0:n0 + k] = 0  # k minority hits lost
    return y, ref, cand


def test_planted_macro_f1_loss_with_unchanged_accuracy_does_not_pass():
    y, ref, cand = planted()
    assert (ref == y).mean() == (cand == y).mean()
    f_ref = f1_score(y, ref, average="macro")
    f_cand = f1_score(y, cand, average="macro")
    assert f_ref - f_cand > 6.5 * 0.01 * f_ref  # about 7x the margin
    # the accuracy test (what metric=macro_f1 used to sign off) passes it ...
    assert paired_signoff(ref == y, cand == y, margin=MARGIN).status == "PASS"
    # ... the macro-F1 test does not
    t = macro_f1_signoff(y, ref, cand, n_classes=2, margin=MARGIN)
    assert t.metric == "macro_f1" and t.status == "FAIL"
    assert t.point == pytest.approx(f_cand - f_ref, abs=1e-12)
    assert t.ref_value == pytest.approx(f_ref) and t.threshold == pytest.approx(-0.01 * f_ref)
    assert t.high < t.threshold and "macro-F1 delta" in t.reasons[0]


def test_point_is_scikit_learns_macro_f1_with_absent_classes():
    rng = np.random.default_rng(0)
    y = rng.choice(4, 500, p=[0.5, 0.3, 0.2, 0.0])  # class 3 never present
    ref = np.where(rng.random(500) < 0.8, y, rng.integers(0, 4, 500))
    cand = np.where(rng.random(500) < 0.05, rng.integers(0, 4, 500), ref)
    t = macro_f1_signoff(y, ref, cand, n_classes=4, margin=MARGIN)
    want = [f1_score(y, p, average="macro", labels=range(4), zero_division=0)
            for p in (ref, cand)]
    assert t.ref_value == pytest.approx(want[0]) and t.cand_value == pytest.approx(want[1])
    assert t.point == pytest.approx(want[1] - want[0])


def test_identical_predictions_have_an_honest_width():
    """No changed prediction: the bootstrap has zero width, the score bound does not."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 150)
    ref = np.where(rng.random(150) < 0.8, y, (y + 1) % 3)
    t = macro_f1_signoff(y, ref, ref.copy(), n_classes=3, margin=MARGIN)
    assert t.methods["bootstrap"]["low"] == t.methods["bootstrap"]["high"] == 0.0
    assert t.high - t.low > 0.02 and t.status == "INCONCLUSIVE"
    big = np.tile(np.arange(3), 4000)
    assert macro_f1_signoff(big, big, big.copy(), n_classes=3,
                            margin=MARGIN).status == "PASS"  # 12,000 identical: enough


def test_rare_class_changes_weigh_more_and_the_bound_covers_them():
    """A loss in a rare class moves macro-F1 more per changed prediction; the scale K is
    the largest one-example effect, so the bound is wide before any such loss is seen."""
    y = np.r_[np.zeros(950, int), np.ones(50, int)]
    ref = y.copy()
    t = macro_f1_signoff(y, ref, ref.copy(), n_classes=2, margin=MARGIN)
    balanced = np.tile([0, 1], 500)
    t_bal = macro_f1_signoff(balanced, balanced, balanced.copy(), n_classes=2, margin=MARGIN)
    assert t.methods["score"]["scale"] > 5 * t_bal.methods["score"]["scale"]
    assert t.high - t.low > 5 * (t_bal.high - t_bal.low)


def test_groups_use_the_cluster_bootstrap_t_and_min_groups():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(60), 20)
    y = rng.integers(0, 2, 1200)
    ref = np.where(rng.random(1200) < 0.85, y, 1 - y)
    cand = np.where(rng.random(1200) < 0.03, 1 - ref, ref)
    t = macro_f1_signoff(y, ref, cand, n_classes=2, margin=MARGIN, groups=groups)
    assert t.methods["bootstrap"]["method"] == "cluster_t"
    assert t.methods["score"]["method"] == "tango_weighted_rao_scott"
    assert t.groups["n_groups"] == 60
    few = macro_f1_signoff(y, ref, cand, n_classes=2, margin=MARGIN, groups=groups % 5)
    assert few.status == "INCONCLUSIVE" and "verdict.min_groups" in few.reasons[-2]


def test_plan_and_errors():
    y, ref, cand = planted(20)
    t = macro_f1_signoff(y[::10], ref[::10], cand[::10], n_classes=2, margin=MARGIN)
    plan = plan_power(t, n_available=1000)
    assert plan.metric == "macro_f1" and "macro-F1 delta" in plan.reason
    with pytest.raises(DataError, match="class indices"):
        macro_f1_signoff(y, ref, cand + 5, n_classes=2, margin=MARGIN)
    with pytest.raises(DataError, match="equal length"):
        macro_f1_signoff(y, ref[:-1], cand, n_classes=2, margin=MARGIN)
