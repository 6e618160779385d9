"""quantkit.verdict.ab_verdict: aggregate decision, reasons, slices with Holm, JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from quantkit.errors import ConfigError, DataError
from quantkit.verdict import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    Margin,
    ab_verdict,
    decide_from_correct,
    paired_bootstrap_delta,
)

REL_1PCT = Margin("relative", 0.01)


def _binary_case(n: int, *, ref_acc: float, flip_to_wrong: float, flip_to_right: float,
                 seed: int):
    """Binary labels; the candidate breaks a share of the reference's right answers and
    fixes a share of its wrong ones."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    ref_right = rng.random(n) < ref_acc
    ref = np.where(ref_right, y, 1 - y)
    u = rng.random(n)
    cand_right = np.where(ref_right, u >= flip_to_wrong, u < flip_to_right)
    cand = np.where(cand_right, y, 1 - y)
    return y, ref, cand


def test_identical_predictions_pass_and_json_round_trip():
    y, ref, _ = _binary_case(1000, ref_acc=0.8, flip_to_wrong=0, flip_to_right=0, seed=0)
    v = ab_verdict(y, ref, ref.copy(), margin=REL_1PCT, seed=0)
    assert v.status == PASS and bool(v)
    assert v.deltas["accuracy"]["point"] == 0.0
    assert v.deltas["accuracy"]["low"] == v.deltas["accuracy"]["high"] == 0.0
    assert v.mcnemar == {"a": v.mcnemar["a"], "b": 0, "c": 0, "d": v.mcnemar["d"], "p": 1.0}
    assert v.required_n is None
    text = json.dumps(v.to_dict(), allow_nan=False)
    assert json.loads(text)["status"] == "PASS"


def test_clear_regression_fails_with_numbers_in_reasons():
    y, ref, cand = _binary_case(3000, ref_acc=0.8, flip_to_wrong=0.06, flip_to_right=0.02,
                                seed=1)
    v = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=0)
    assert v.status == FAIL and not v
    iv = v.deltas["accuracy"]
    assert iv["high"] < -v.margin["abs"]
    assert v.margin["abs"] == pytest.approx(0.01 * np.mean(ref == y))
    assert f"{iv['point']:+.4f}" in v.reasons[0] and "below -margin" in v.reasons[0]
    assert "macro_f1" in v.deltas and any("McNemar" in r for r in v.reasons)
    assert v.mcnemar["p"] < 1e-6


def test_inconclusive_reports_required_n():
    y, ref, cand = _binary_case(400, ref_acc=0.77, flip_to_wrong=0.03, flip_to_right=0.08,
                                seed=2)
    v = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=0)
    assert v.status == INCONCLUSIVE and not v
    assert v.required_n is not None and v.required_n > v.n
    assert any(f"about {v.required_n} paired examples" in r for r in v.reasons)


def test_ab_verdict_uses_the_same_interval_as_the_fast_path():
    y, ref, cand = _binary_case(2556, ref_acc=0.77, flip_to_wrong=0.03, flip_to_right=0.09,
                                seed=3)
    v = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=11, extra_metrics=())
    fast = decide_from_correct(ref == y, cand == y, margin=REL_1PCT, seed=11)
    plain = paired_bootstrap_delta(y, ref, cand, seed=11)
    assert v.deltas["accuracy"] == {**fast.interval.to_dict(), "ref": fast.ref_value,
                                    "cand": fast.cand_value}
    assert fast.interval == plain
    assert v.status == fast.status


def test_slice_regression_overrides_aggregate_pass_with_holm():
    rng = np.random.default_rng(4)
    n = 10_000
    y = rng.integers(0, 2, n)
    ref = np.where(rng.random(n) < 0.8, y, 1 - y)
    cand = ref.copy()
    bucket = np.array(["<=16", "17-32", "33-64", "65-128"])[rng.integers(0, 4, n)]
    long_tail = np.zeros(n, dtype=bool)
    long_tail[rng.choice(n, 250, replace=False)] = True
    bucket[long_tail] = ">128"
    bucket[:12] = "tiny"                      # a tiny slice: skipped, not tested
    # the candidate breaks 25% of the reference's right answers, only on long inputs
    break_ = long_tail & (ref == y) & (rng.random(n) < 0.25)
    cand[break_] = 1 - y[break_]
    source = np.where(rng.random(n) < 0.5, "web", "news")

    without_slices = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=0)
    assert without_slices.status == PASS

    v = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=0,
                   slices={"length": bucket, "source": source})
    assert v.status == FAIL
    by_key = {(r["slice"], r["value"]): r for r in v.slices}
    bad = by_key[("length", ">128")]
    assert bad["status"] == FAIL and bad["p_regression_holm"] < 0.05
    assert bad["delta"]["high"] < -bad["margin_abs"]
    assert by_key[("length", "tiny")]["status"] == SKIPPED
    assert all(r["status"] != FAIL for k, r in by_key.items() if k != ("length", ">128"))
    assert any("slice length=>128" in r and "Holm-adjusted p" in r for r in v.reasons)
    assert any("aggregate PASS overridden to FAIL" in r for r in v.reasons)
    tested = [r for r in v.slices if r["status"] != SKIPPED]
    assert len(tested) == 7
    assert tested[0]["n_boot"] >= 10 * len(tested) / 0.05
    json.dumps(v.to_dict(), allow_nan=False)


def test_no_slice_fails_when_candidate_is_equivalent():
    y, ref, cand = _binary_case(6000, ref_acc=0.8, flip_to_wrong=0.01, flip_to_right=0.04,
                                seed=5)
    keys = np.random.default_rng(6).integers(0, 6, y.size)
    v = ab_verdict(y, ref, cand, margin=REL_1PCT, seed=0, slices={"k": keys})
    assert v.status == PASS
    assert all(r["status"] in (PASS, INCONCLUSIVE) for r in v.slices)


def test_macro_f1_as_primary_metric():
    rng = np.random.default_rng(7)
    n = 3000
    y = rng.integers(0, 3, n)
    ref = np.where(rng.random(n) < 0.85, y, rng.integers(0, 3, n))
    cand = ref.copy()
    v = ab_verdict(y, ref, cand, margin=Margin("absolute", 0.01), metric="macro_f1",
                   extra_metrics=("accuracy",), seed=0)
    assert v.status == PASS and v.metric == "macro_f1"
    assert set(v.deltas) == {"macro_f1", "accuracy"}


def test_ab_verdict_input_errors():
    y = np.array([0, 1, 1])
    with pytest.raises(ConfigError, match="verdict.margin"):
        ab_verdict(y, y, y, margin=0.01)
    with pytest.raises(ConfigError, match="verdict.alpha"):
        ab_verdict(y, y, y, margin=REL_1PCT, alpha=1.5)
    with pytest.raises(ConfigError, match="verdict.min_slice_n"):
        ab_verdict(y, y, y, margin=REL_1PCT, min_slice_n=0)
    with pytest.raises(DataError, match="equal length"):
        ab_verdict(y, y[:2], y, margin=REL_1PCT)
    with pytest.raises(DataError, match="one key per example"):
        ab_verdict(y, y, y, margin=REL_1PCT, slices={"s": np.zeros(2)})
