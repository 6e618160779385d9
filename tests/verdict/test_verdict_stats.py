"""quantkit.verdict statistics: McNemar, Holm, margins, decide, required_n, paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm
from sklearn.metrics import accuracy_score, f1_score

from quantkit.errors import ConfigError
from quantkit.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    Interval,
    Margin,
    check_alpha,
    decide,
    holm_adjust,
    margin_abs,
    mcnemar_exact,
    mcnemar_table,
    paired_bootstrap_delta,
    required_n,
)
from quantkit.verdict.stats import _CellF1, _encode


# --------------------------------------------------------------------------- McNemar


@pytest.mark.parametrize("b, c", [(1, 5), (5, 1), (0, 10), (3, 9), (12, 20), (0, 1)])
def test_mcnemar_exact_matches_hand_binomial(b, c):
    n = b + c
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    assert mcnemar_exact(b, c) == pytest.approx(min(1.0, 2 * tail), rel=1e-12)
    assert mcnemar_exact(b, c) == pytest.approx(binomtest(b, n, 0.5).pvalue, rel=1e-9)


def test_mcnemar_exact_small_table_values():
    assert mcnemar_exact(1, 5) == pytest.approx(2 * (1 + 6) / 64)     # 0.21875
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)
    for k in (0, 1, 4, 50):
        assert mcnemar_exact(k, k) == 1.0


def test_mcnemar_table():
    ref = np.array([1, 1, 1, 0, 0, 1, 0], dtype=bool)
    cand = np.array([1, 0, 1, 1, 0, 0, 0], dtype=bool)
    assert mcnemar_table(ref, cand) == (2, 2, 1, 2)


# --------------------------------------------------------------------------- Holm


def test_holm_adjust_by_hand():
    # sorted: .005*4 = .02, .01*3 = .03, .03*2 = .06, .04*1 = .04 -> running max .06
    got = holm_adjust([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm_adjust([0.5, 0.9]), [1.0, 1.0])
    assert holm_adjust([]).size == 0


# --------------------------------------------------------------------------- margin, decide


def test_margin_abs_and_validation():
    assert margin_abs(Margin("relative", 0.01), 0.77) == pytest.approx(0.0077)
    assert margin_abs(Margin("absolute", 0.005), 0.77) == 0.005
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="verdict.margin"):
            Margin("relative", bad)
    with pytest.raises(ConfigError, match="verdict.margin"):
        Margin("absolute", -0.001)
    with pytest.raises(ConfigError, match="verdict.margin_kind"):
        Margin("percent", 1.0)
    assert Margin("absolute", 0.0).value == 0.0
    for bad in (0.0, 1.0, -0.05, 2, float("nan")):
        with pytest.raises(ConfigError, match="verdict.alpha"):
            check_alpha(bad)
    with pytest.raises(ConfigError, match="verdict.n_boot"):
        paired_bootstrap_delta([0, 1], [0, 1], [0, 1], n_boot=10)


def test_decide_rule_and_boundaries():
    m = 0.0077
    assert decide(Interval(-0.0031, -0.0072, 0.0008, 0.95), m) == PASS
    assert decide(Interval(-0.02, -0.03, -0.01, 0.95), m) == FAIL
    assert decide(Interval(-0.008, -0.012, -0.004, 0.95), m) == INCONCLUSIVE
    assert decide(Interval(-0.0, -m, 0.01, 0.95), m) == INCONCLUSIVE     # low == -m is not PASS
    assert decide(Interval(-0.02, -0.03, -m, 0.95), m) == INCONCLUSIVE   # high == -m is not FAIL
    with pytest.raises(ConfigError):
        decide(Interval(0, 0, 0, 0.95), -0.1)


def test_required_n_formula():
    z = norm.ppf(0.975)
    sd, delta, m = 0.25, -0.003, 0.0077
    expected = math.ceil((z * sd / abs(delta + m)) ** 2)
    assert required_n(sd=sd, delta=delta, margin_abs=m, alpha=0.05) == expected
    assert required_n(sd=sd, delta=delta, margin_abs=m, alpha=0.05,
                      n_current=10 * expected) == 10 * expected + 1
    with_power = required_n(sd=sd, delta=delta, margin_abs=m, alpha=0.05, power=0.8)
    assert with_power == math.ceil(((z + norm.ppf(0.8)) * sd / abs(delta + m)) ** 2)
    assert required_n(sd=sd, delta=-m, margin_abs=m, alpha=0.05) is None
    assert required_n(sd=0.0, delta=0.0, margin_abs=m, alpha=0.05) is None


# --------------------------------------------------------------------------- bootstrap


def _paired_preds(n: int, rng: np.random.Generator, classes: int = 3):
    y = rng.integers(0, classes, n)
    ref = np.where(rng.random(n) < 0.8, y, rng.integers(0, classes, n))
    cand = np.where(rng.random(n) < 0.95, ref, rng.integers(0, classes, n))
    return y, ref, cand


def test_paired_bootstrap_point_matches_sklearn_and_is_seeded():
    y, ref, cand = _paired_preds(2556, np.random.default_rng(0))
    acc = paired_bootstrap_delta(y, ref, cand, seed=3)
    assert acc.point == pytest.approx(accuracy_score(y, cand) - accuracy_score(y, ref))
    assert acc.low <= acc.point <= acc.high and acc.level == 0.95
    assert paired_bootstrap_delta(y, ref, cand, seed=3) == acc
    assert paired_bootstrap_delta(y, ref, cand, seed=4) != acc
    f1 = paired_bootstrap_delta(y, ref, cand, metric="macro_f1", seed=3)
    sk = (f1_score(y, cand, average="macro", labels=[0, 1, 2], zero_division=0)
          - f1_score(y, ref, average="macro", labels=[0, 1, 2], zero_division=0))
    assert f1.point == pytest.approx(sk, abs=1e-12)
    assert f1.low <= f1.point <= f1.high


def test_macro_f1_from_resampled_cells_equals_sklearn_on_resampled_examples():
    """The vectorized cell formula is exact: same numbers as sklearn on explicit resamples."""
    rng = np.random.default_rng(1)
    y, ref, cand = _paired_preds(300, rng, classes=4)
    cand[:5] = 7                                     # a label outside the fixed label set
    labels = [0, 1, 2, 3]
    (yc, rc, cc), k = _encode(y, ref, cand, labels)
    base = k + 1
    cells, cell_of = np.unique((yc * base + rc) * base + cc, return_inverse=True)
    f1_ref = _CellF1(cells // (base * base), (cells // base) % base, k)
    f1_cand = _CellF1(cells // (base * base), cells % base, k)
    for _ in range(25):
        idx = rng.integers(0, y.size, y.size)
        w = np.bincount(cell_of.ravel()[idx], minlength=cells.size)[None, :].astype(float)
        for fn, pred in ((f1_ref, ref), (f1_cand, cand)):
            expected = f1_score(y[idx], pred[idx], labels=labels, average="macro",
                                zero_division=0)
            assert fn(w)[0] == pytest.approx(expected, abs=1e-12)


def test_cell_bootstrap_distribution_matches_index_bootstrap():
    """Multinomial cell counts reproduce the index bootstrap's distribution (accuracy)."""
    rng = np.random.default_rng(2)
    y, ref, cand = _paired_preds(800, rng)
    fast = paired_bootstrap_delta(y, ref, cand, n_boot=20000, alpha=0.1, seed=5)
    d = (cand == y).astype(float) - (ref == y).astype(float)
    idx = rng.integers(0, y.size, (20000, y.size))
    slow = d[idx].mean(axis=1)
    lo, hi = np.quantile(slow, [0.05, 0.95])
    assert fast.low == pytest.approx(lo, abs=1.5e-3)
    assert fast.high == pytest.approx(hi, abs=1.5e-3)
    assert fast.se == pytest.approx(slow.std(ddof=1), rel=0.03)


def test_callable_metric_and_many_labels_path():
    rng = np.random.default_rng(3)
    y, ref, cand = _paired_preds(200, rng)

    def error_rate(t, p):
        return float(np.mean(t != p))

    iv = paired_bootstrap_delta(y, ref, cand, metric=error_rate, n_boot=200, seed=0)
    assert iv.point == pytest.approx(np.mean(cand != y) - np.mean(ref != y))
    # many classes relative to n exercises the index + bincount route for macro-F1
    y, ref, cand = _paired_preds(150, rng, classes=60)
    iv = paired_bootstrap_delta(y, ref, cand, metric="macro_f1", n_boot=300, seed=0)
    labels = np.unique(np.concatenate([y, ref, cand]))
    sk = (f1_score(y, cand, average="macro", labels=labels, zero_division=0)
          - f1_score(y, ref, average="macro", labels=labels, zero_division=0))
    assert iv.point == pytest.approx(sk, abs=1e-12)
    with pytest.raises(ConfigError, match="verdict.metric"):
        paired_bootstrap_delta(y, ref, cand, metric="auc")
