"""The recommendation by estimated cost (issue 25): with a target GPU and no throughput measured
on the target's runtime, the cheapest test PASS is recommended, an FP8 one included."""

import numpy as np

from quantkit.verdict import (Margin, TestPolicy, decide_family, declare_family, paired_signoff,
                              recommend_candidate)

M = Margin("absolute", 0.008)


def _tests(rng, n, cells, *, seed0=0):
    out = {}
    for i, (name, (b, c)) in enumerate(cells.items()):
        ref = rng.random(n) < 0.8
        u = rng.random(n)
        cand = np.where(ref, u >= b / 0.8, u < c / 0.2)
        out[name] = paired_signoff(ref, cand, margin=M, candidate=name,
                                   policy=TestPolicy(seed=seed0 + i))
    return out


def test_the_cheapest_pass_by_estimate_is_recommended_and_the_label_said():
    rng = np.random.default_rng(5)
    cells = {"fp16": (0.002, 0.002), "int8.mse": (0.01, 0.01), "fp8.minmax": (0.004, 0.004)}
    dec = decide_family(declare_family(_tests(rng, 4000, cells)),
                        _tests(rng, 8000, cells, seed0=20))
    assert set(dec.passing) == set(cells)
    counts = {"fp16": 0, "int8.mse": 48, "fp8.minmax": 0}
    # without a cost: the most INT8 nodes
    assert recommend_candidate(dec, int8_nodes=counts).candidate == "int8.mse"
    cost = {"fp16": 1.0, "int8.mse": 0.9, "fp8.minmax": 0.6}
    rec = recommend_candidate(dec, int8_nodes=counts, cost=cost, cost_label="estimated on H200")
    assert rec.candidate == "fp8.minmax"
    assert "estimated on H200" in rec.reason and "not measured" in rec.basis
    # a cost model that finds the quantized formats slower than FP16 recommends FP16
    slow = {"fp16": 1.0, "int8.mse": 1.2, "fp8.minmax": 1.1}
    assert recommend_candidate(dec, int8_nodes=counts, cost=slow).candidate == "fp16"
    # measured throughput on the target's runtime outranks the estimate
    tp = {"fp16": 100.0, "int8.mse": 200.0, "fp8.minmax": 150.0}
    assert recommend_candidate(dec, int8_nodes=counts, throughput=tp,
                               cost=cost).candidate == "int8.mse"
