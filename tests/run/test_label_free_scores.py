"""KL and mean-abs-logit distance as label-free verdict metrics for logit outputs, on the
same dev / test protocol, from real CLI runs on the tiny world."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tinyworld

from quantkit.compare.metrics import kl_divergence, kl_per_example
from quantkit.run.verdicts import example_scores


def test_per_example_scores_match_the_means():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 3))
    cand = ref + rng.normal(0, 0.1, (50, 3))
    kl = example_scores("kl", ref, cand)
    assert kl.shape == (50,) and (kl >= 0).all()
    assert abs(kl.mean() - kl_divergence(ref, cand)) < 1e-12
    assert np.allclose(kl_per_example(ref, ref), 0.0)
    assert abs(example_scores("abs_logit", ref, cand).mean() - np.abs(ref - cand).mean()) < 1e-12
    agree = example_scores("agreement", ref, cand)
    assert set(np.unique(agree)) <= {0.0, 1.0}


#: snippets of this module's label_free_world (tests/conftest.py)
WORLD_ROWS = 800


def _run(world, name, *extra):
    r, run_dir = tinyworld.run_in(world, name, *tinyworld.LABEL_FREE,
                                  "precision.search.enabled=false", *extra, own_ledger=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((run_dir / "record.json").read_text()), r.stdout


@pytest.mark.parametrize("metric, key", [("kl", "max_kl"), ("abs_logit", "max_abs_logit")])
def test_ceiling_metrics_pass_and_fail(label_free_world, metric, key):
    """The per-example ceiling and the share within it (issue 24: exact binomial bound)."""
    rec, out = _run(label_free_world, f"{metric}-loose", f"verdict.metric={metric}")
    rows = rec["signoff"]["decision"]["rows"]
    assert all(r["metric"] == metric for r in rows)
    fp16 = rec["candidates"]["fp16"]
    v = fp16["verdict"]["deltas"][metric]
    share = 1 - rec["config"]["verdict"]["score_quantile"]
    assert fp16["verdict"]["status"] == "PASS" and v["low"] > share
    sig = fp16["verdict"]["signoff"]
    assert sig["methods"]["score"]["method"] == "clopper_pearson"
    # the declared ceiling less the engine check's share (target=tensorrt signed on the
    # CPU emulation: run/deployment.py signoff_budget)
    from quantkit.verdict.engine_gate import split_budget
    declared = rec["config"]["verdict"][key]
    share = rec["config"]["compare"]["numerics_margin_share"]
    bound = fp16["verdict"]["margin"]["bound"]
    assert abs(bound - split_budget(metric, declared, share).signoff) < 1e-12
    assert 0 < bound < declared
    # the mean is recorded beside the tested share, and is the candidate's metric
    assert abs(sig["methods"]["score"]["score_mean"] - fp16["metrics"][metric]) < 1e-9
    assert "kl" in fp16["metrics"] and "agreement" in fp16["metrics"]  # beside each other
    assert f"{metric} share [95% CI]" in out
    # a tolerance a tenth of INT8's 95% quantile: at most 95% of its examples are within
    # it, so no INT8 candidate can PASS
    q95 = min(c["verdict"]["signoff"]["methods"]["score"]["score_at_quantile"]
              for n, c in rec["candidates"].items() if n.startswith("int8."))
    strict, _ = _run(label_free_world, f"{metric}-strict", f"verdict.metric={metric}",
                     f"verdict.{key}={q95 / 10:.3g}")
    for n, c in strict["candidates"].items():
        if n.startswith("int8."):
            # |logit delta| is spread evenly: FAIL; the tiny world's INT8 KL is near zero on
            # most examples, so its share may sit at the declared one: never a PASS
            want = {"FAIL"} if metric == "abs_logit" else {"FAIL", "INCONCLUSIVE"}
            assert c["verdict"]["status"] in want, (n, c["verdict"]["reasons"])
            assert c["verdict"]["deltas"][metric]["low"] < share


def test_kl_is_gated_by_churn(label_free_world):
    """The churn gate joins a KL verdict on logits (max_flip_rate set)."""
    rec, _ = _run(label_free_world, "kl-gated", "verdict.metric=kl",
                  "verdict.max_flip_rate=0.05")
    sig = rec["candidates"]["fp16"]["verdict"]["signoff"]
    assert sig["gate"] is not None and sig["gate"]["metric"] == "churn"
