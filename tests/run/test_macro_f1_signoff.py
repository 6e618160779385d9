"""verdict.metric=macro_f1 is signed off as macro-F1 by the run's own candidate_test (issue 24,
point 2): the planted candidate with unchanged accuracy and macro-F1 down 7x the margin does
not PASS, while the accuracy test of the same predictions does."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verdict"))

from test_macro_f1 import planted  # noqa: E402

from runworld import settings_for  # noqa: E402


def _ctx_with_test_split(ctx, tiny, *overrides):
    from quantkit.data.splits import TextSplit

    y, _, _ = planted()
    test = TextSplit("test", [f"text {i}" for i in range(y.size)], y)
    splits = dataclasses.replace(ctx.splits, test=test)
    return dataclasses.replace(ctx, settings=settings_for(tiny, "stage_cache=false", *overrides),
                               splits=splits)


def _logits(pred: np.ndarray) -> np.ndarray:
    out = np.zeros((pred.size, 2), dtype=np.float32)
    out[np.arange(pred.size), pred] = 1.0
    return out


def test_planted_macro_f1_loss_does_not_pass_through_the_run(ctx, tiny):
    from quantkit.run.verdicts import candidate_test, decision_metric

    _, ref, cand = planted()
    c_f1 = _ctx_with_test_split(ctx, tiny, "verdict.metric=macro_f1")
    assert decision_metric(c_f1) == "macro_f1"
    t = candidate_test(c_f1, "test", _logits(ref), _logits(cand), name="int8.planted")
    assert t.metric == "macro_f1" and t.status == "FAIL", t.reasons
    assert t.gate is not None and t.gate["status"] == "PASS"  # churn 8%: not what fails it
    d = t.to_verdict_dict()
    assert d["metric"] == "macro_f1" and d["deltas"]["macro_f1"]["high"] < -0.03
    # the old, wrong signature: the same predictions tested on accuracy, at the whole declared
    # margin as when the signed numbers are the deployment's own (target=ort_cpu, fused)
    c_acc = _ctx_with_test_split(ctx, tiny, "verdict.metric=accuracy", "target=ort_cpu",
                                 "backend.qdq_mode=fused", "precision.remainder=fp32")
    t_acc = candidate_test(c_acc, "test", _logits(ref), _logits(cand), name="int8.planted")
    assert t_acc.metric == "accuracy" and t_acc.status == "PASS", t_acc.reasons
