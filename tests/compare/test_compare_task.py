"""quantkit.compare.task: task metrics, agreement, slices, length buckets."""

from __future__ import annotations

import numpy as np
import pytest

from quantkit.compare.task import (
    agreement,
    mean_kl,
    predictions,
    slice_metrics,
    task_metrics,
)
from quantkit.data.feeds import length_buckets
from quantkit.errors import ConfigError, DataError


def test_task_metrics_by_hand():
    y = np.array([0, 0, 1, 1, 1, 2])
    pred = np.array([0, 1, 1, 1, 0, 1])
    got = task_metrics(y, pred, labels=[0, 1, 2], label_names=["neg", "pos", "neutral"])
    assert got["n"] == 6
    assert got["accuracy"] == pytest.approx(3 / 6)
    # class 0: tp 1, fp 1, fn 1 -> p = r = f1 = 1/2
    # class 1: tp 2, fp 2, fn 1 -> p 1/2, r 2/3, f1 4/7
    # class 2: never predicted -> 0 (zero_division=0), support 1
    assert got["per_class"]["neg"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    pos = got["per_class"]["pos"]
    assert pos["precision"] == pytest.approx(0.5) and pos["recall"] == pytest.approx(2 / 3)
    assert pos["f1"] == pytest.approx(4 / 7) and pos["support"] == 3
    assert got["per_class"]["neutral"]["f1"] == 0.0
    assert got["macro_f1"] == pytest.approx((0.5 + 4 / 7 + 0.0) / 3)


def test_task_metrics_from_logits_maps_columns_to_labels():
    y = np.array(["cat", "dog", "dog"])
    logits = np.array([[2.0, 0.1], [0.0, 3.0], [5.0, 1.0]])
    got = task_metrics(y, logits, labels=["cat", "dog"])
    assert got["accuracy"] == pytest.approx(2 / 3)
    assert set(got["per_class"]) == {"cat", "dog"}
    with pytest.raises(DataError, match="columns"):
        task_metrics(y, logits, labels=["cat", "dog", "eel"])
    with pytest.raises(ConfigError, match="label_names"):
        task_metrics(y, logits, labels=["cat", "dog"], label_names=["a"])


def test_agreement_and_mean_kl():
    assert agreement([0, 1, 2, 2], [0, 1, 1, 2]) == 0.75
    logits_a = np.array([[3.0, 1.0], [0.0, 2.0]])
    logits_b = np.array([[1.0, 3.0], [0.0, 2.5]])
    assert agreement(logits_a, logits_b) == 0.5
    assert mean_kl(logits_a, logits_a) == 0.0
    assert mean_kl(logits_a, logits_b) > 0.0
    np.testing.assert_array_equal(predictions(logits_a), [0, 1])


def test_slice_metrics():
    y = np.array([1, 0, 1, 1, 0, 0])
    pred = np.array([1, 0, 0, 1, 1, 0])
    got = slice_metrics(y, pred, {"source": np.array(["a", "a", "b", "b", "b", "c"])})
    assert got == {"source": {"a": {"accuracy": 1.0, "n": 2},
                              "b": {"accuracy": pytest.approx(1 / 3), "n": 3},
                              "c": {"accuracy": 1.0, "n": 1}}}
    with pytest.raises(DataError, match="one key per example"):
        slice_metrics(y, pred, {"bad": np.zeros(5)})


def test_length_buckets():
    lengths = np.array([0, 16, 17, 32, 33, 64, 65, 128, 129, 1000])
    got = length_buckets(lengths)
    assert got.tolist() == ["<=16", "<=16", "17-32", "17-32", "33-64", "33-64",
                            "65-128", "65-128", ">128", ">128"]
    assert length_buckets(np.array([1, 2, 3]), edges=(1, 2)).tolist() == ["<=1", "2", ">2"]
    with pytest.raises(ConfigError, match="increasing"):
        length_buckets(lengths, edges=(32, 16))
    with pytest.raises(DataError):
        length_buckets(np.array([1.5]))
    assert length_buckets(np.array([], dtype=int)).size == 0
