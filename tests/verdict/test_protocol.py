"""Dev-declared family, test ledger, familywise decision and recommendation."""

import json
import math

import numpy as np
import pytest

from quantkit.errors import ConfigError, DataError, QuantkitError
from quantkit.verdict import (FAIL, INCONCLUSIVE, PASS, Margin, TestLedger, TestPolicy,
                              TestSplitReuse, decide_family, declare_family, paired_signoff,
                              plan_family, recommend_candidate)

M = Margin("absolute", 0.008)


def _paired(rng, n, *, p_b, p_c, p_ref=0.8):
    ref = rng.random(n) < p_ref
    u = rng.random(n)
    return ref, np.where(ref, u >= p_b / p_ref, u < p_c / (1 - p_ref))


def _tests(rng, n, cells, *, seed0=0):
    return {name: paired_signoff(*_paired(rng, n, p_b=b, p_c=c), margin=M, candidate=name,
                                 policy=TestPolicy(seed=seed0 + i))
            for i, (name, (b, c)) in enumerate(cells.items())}


CELLS = {"fp16": (0.002, 0.002), "int8.mse": (0.025, 0.024), "mixed": (0.02, 0.018)}


def test_family_order_comes_from_dev_evidence_and_is_fingerprinted():
    dev = _tests(np.random.default_rng(0), 3000, {"int8.mse": (0.025, 0.024),
                                                  "fp16": (0.002, 0.002),
                                                  "mixed": (0.03, 0.02)})
    fam = declare_family(dev)
    assert fam.candidates[0] == "fp16"  # the strongest dev evidence first
    ps = [dev[c].p_noninferiority for c in fam.candidates]
    assert ps == sorted(ps)
    d = json.loads(json.dumps(fam.to_dict()))
    assert d["order"] == list(fam.candidates) and d["alpha_one_sided"] == 0.025
    assert d["method"] == "fixed_sequence" and set(d["basis"]) == set(dev)
    assert declare_family(dev, method="holm").sha256 != fam.sha256
    new_plan = declare_family(dev, supersedes=fam.sha256)
    assert new_plan.to_dict()["supersedes"] == fam.sha256 and new_plan.sha256 != fam.sha256
    assert declare_family(dev, order=["mixed", "fp16", "int8.mse"]).candidates[0] == "mixed"
    with pytest.raises(ConfigError, match="verdict.family"):
        declare_family(dev, method="bonferroni-ish")
    with pytest.raises(ConfigError, match="every family candidate once"):
        declare_family(dev, order=["fp16"])


def test_ledger_refuses_a_second_test_evaluation_and_undeclared_candidates():
    dev = _tests(np.random.default_rng(1), 2000, CELLS)
    fam = declare_family(dev)
    ledger = TestLedger(fam, split_sha256="abc")
    assert ledger.record("fp16", n=6000) == 0
    with pytest.raises(TestSplitReuse, match="second test-split evaluation") as err:
        ledger.record("fp16", n=6000)
    assert isinstance(err.value, QuantkitError) and "new plan" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(TestSplitReuse, match="declared sign-off family"):
        ledger.record("int8.minmax", n=6000)
    d = ledger.to_dict()
    assert d["evaluations"] == [{"index": 0, "candidate": "fp16", "n": 6000,
                                 "evidence_sha256": None}]
    assert d["family_sha256"] == fam.sha256 and d["evaluated_once"] and not d["complete"]
    assert set(d["missing"]) == {"int8.mse", "mixed"}
    with pytest.raises(ConfigError, match="declare_family"):
        TestLedger(["fp16"])


def test_fixed_sequence_stops_at_the_first_non_pass():
    rng = np.random.default_rng(2)
    dev = _tests(rng, 3000, CELLS)
    fam = declare_family(dev, order=["fp16", "mixed", "int8.mse"])
    test = {"fp16": paired_signoff(*_paired(rng, 8000, p_b=0.002, p_c=0.002), margin=M),
            # mixed truly loses 2 margins: FAIL; int8.mse after it is lossless but not reached
            "mixed": paired_signoff(*_paired(rng, 8000, p_b=0.04, p_c=0.024), margin=M),
            "int8.mse": paired_signoff(*_paired(rng, 8000, p_b=0.02, p_c=0.02), margin=M)}
    assert [test[c].status for c in fam.candidates] == [PASS, FAIL, PASS]
    ledger = TestLedger(fam)
    for c in fam.candidates:
        ledger.record(c, n=8000)
    dec = decide_family(fam, test, ledger=ledger)
    assert [r["status"] for r in dec.rows] == [PASS, FAIL, INCONCLUSIVE]
    assert dec.stopped_at == "mixed" and "not reached" in dec.rows[2]["reason"]
    assert dec.rows[2]["raw_status"] == PASS
    adj = [r["p_noninferiority_adjusted"] for r in dec.rows]
    assert adj == sorted(adj)  # running maximum
    d = json.loads(json.dumps(dec.to_dict()))
    assert d["order"] == list(fam.candidates) and d["alpha_one_sided"] == 0.025
    for key in ("low", "high", "raw_status", "status", "point", "n"):
        assert key in d["rows"][0]
    # Holm over the same evidence reaches int8.mse
    holm = declare_family(dev, method="holm", order=list(fam.candidates))
    assert decide_family(holm, test).status("int8.mse") == PASS


def test_decide_family_checks_the_ledger_and_the_family():
    rng = np.random.default_rng(3)
    dev = _tests(rng, 2000, CELLS)
    fam = declare_family(dev)
    test = _tests(rng, 2000, CELLS, seed0=10)
    with pytest.raises(DataError, match="did not record"):
        decide_family(fam, test, ledger=TestLedger(fam))
    with pytest.raises(ConfigError, match="outside the declared family"):
        decide_family(fam, {**test, "int8.minmax": test["fp16"]})
    partial = decide_family(fam, {"fp16": test["fp16"]})
    assert all(r["status"] == INCONCLUSIVE for r in partial.rows if r["candidate"] != "fp16")


def test_recommendation_only_among_test_passes_not_slower_than_fp16():
    rng = np.random.default_rng(4)
    cells = {"fp16": (0.002, 0.002), "int8.mse": (0.01, 0.01), "mixed": (0.01, 0.01)}
    dev = _tests(rng, 4000, cells)
    fam = declare_family(dev)
    test = _tests(rng, 8000, cells, seed0=20)
    dec = decide_family(fam, test)
    assert set(dec.passing) == {"fp16", "int8.mse", "mixed"}
    counts = {"fp16": 0, "int8.mse": 48, "mixed": 30}
    rec = recommend_candidate(dec, int8_nodes=counts)
    assert rec.candidate == "int8.mse" and "PASS on test" in rec.reason
    # measured on the target's own runtime: int8.mse slower than FP16 at batch 1
    tp = {"fp16": {1: 150.0, 32: 400.0}, "int8.mse": {1: 120.0, 32: 600.0},
          "mixed": {1: 160.0, 32: 410.0}}
    rec = recommend_candidate(dec, int8_nodes=counts, throughput=tp)
    assert rec.candidate == "mixed" and "slower than FP16" in rec.excluded["int8.mse"]
    tp["mixed"] = {1: 100.0, 32: 300.0}
    rec = recommend_candidate(dec, int8_nodes={"int8.mse": 48, "mixed": 30}, throughput=tp)
    assert rec.candidate == "fp16"  # FP16 itself stays eligible
    rec = recommend_candidate(dec, throughput={"int8.mse": 1.0})
    assert rec.candidate is None and "not for fp16" in rec.reason
    assert json.loads(json.dumps(rec.to_dict()))["candidate"] is None


def test_signoff_record_holds_family_plan_ledger_decision_and_recommendation():
    from quantkit.verdict import signoff_record

    rng = np.random.default_rng(8)
    dev = _tests(rng, 3000, CELLS)
    fam = declare_family(dev)
    plan = plan_family(fam, dev, n_test=6000)
    ledger = TestLedger(fam, split_sha256="f00d")
    tests = {}
    for c in fam.candidates:
        ledger.record(c, n=6000)
        tests[c] = paired_signoff(*_paired(rng, 6000, p_b=CELLS[c][0], p_c=CELLS[c][1]),
                                  margin=M, candidate=c)
    dec = decide_family(fam, tests, ledger=ledger)
    rec = recommend_candidate(dec, int8_nodes={"fp16": 0, "int8.mse": 48, "mixed": 30})
    rec_dict = json.loads(json.dumps(signoff_record(family=fam, plan=plan, ledger=ledger,
                                                    tests=tests, decision=dec,
                                                    recommendation=rec, dev=dev)))
    assert rec_dict["alpha_one_sided"] == 0.025
    assert rec_dict["family"]["order"] == list(fam.candidates)
    assert [e["candidate"] for e in rec_dict["test_ledger"]["evaluations"]] == list(fam.candidates)
    assert rec_dict["test_ledger"]["complete"] and rec_dict["test_ledger"]["evaluated_once"]
    assert rec_dict["power_plan"]["n_test"] == 6000 and set(rec_dict["test"]) == set(CELLS)
    other = declare_family(dev, method="holm")
    with pytest.raises(DataError, match="different declarations"):
        signoff_record(family=other, plan=plan, ledger=ledger, tests=tests, decision=dec,
                       recommendation=rec)


def test_no_candidate_recommended_when_nothing_passes_on_test():
    rng = np.random.default_rng(5)
    cells = {"int8.mse": (0.04, 0.03), "mixed": (0.04, 0.031)}  # both lose > margin
    fam = declare_family(_tests(rng, 3000, cells))
    dec = decide_family(fam, _tests(rng, 6000, cells, seed0=7))
    rec = recommend_candidate(dec, int8_nodes={"int8.mse": 48, "mixed": 30})
    assert rec.candidate is None and "none PASSes on test" in rec.reason
    assert set(rec.excluded) == {"int8.mse", "mixed"}


def test_power_plan_of_the_family_before_test():
    rng = np.random.default_rng(6)
    dev = _tests(rng, 3000, CELLS)
    fam = declare_family(dev)
    plan = plan_family(fam, dev, n_test=6000)
    rows = {r["candidate"]: r for r in plan.rows}
    assert rows["fp16"]["n_required"] < 6000 and rows["fp16"]["adequate"]
    assert [r["position"] for r in plan.rows] == [1, 2, 3]
    assert "test split n=6000" in plan.reason
    holm = plan_family(declare_family(dev, method="holm"), dev, n_test=6000)
    for r in holm.rows:  # Holm plans at alpha / k: more examples needed
        if r["n_required"] is not None and rows[r["candidate"]]["n_required"] is not None:
            assert r["n_required"] >= rows[r["candidate"]]["n_required"]
            assert r["alpha_one_sided"] == pytest.approx(0.025 / 3)
    json.dumps(plan.to_dict())


def test_familywise_false_pass_is_controlled_when_every_candidate_loses_the_margin():
    """Three candidates each truly losing exactly the margin: P(any PASS) <= alpha."""
    rng = np.random.default_rng(7)
    sims, n, m = 400, 3000, 0.008
    cells = {"fp16": (0.02, 0.02 - m), "int8.mse": (0.04, 0.04 - m), "mixed": (0.03, 0.03 - m)}
    any_pass = {"fixed_sequence": 0, "holm": 0}
    for s in range(sims):
        dev = _tests(rng, 1000, cells, seed0=s)
        test = _tests(rng, n, cells, seed0=s + 1)
        for method in any_pass:
            dec = decide_family(declare_family(dev, method=method), test)
            any_pass[method] += bool(dec.passing)
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / sims)
    assert all(v / sims <= bound for v in any_pass.values()), any_pass
