"""search_fp16_set on a real Q/DQ + FP16 chain in ONNX Runtime, and on synthetic oracles.

The real scenario: six MatMul layers; the Add in front of ``mm3`` puts a ~300 offset on one
channel, so ``mm3``'s per-tensor INT8 activation scale wipes out every other channel (its
weight row for that channel is tiny, so FP32 is fine). Keeping exactly ``mm3`` in FP16
must PASS a real ``paired_signoff``; full INT8 must FAIL.

The synthetic oracles are pure-python ``full_eval`` functions (PASS iff the FP16 set is
large enough in a monotone sense): they test the search's bookkeeping and its bound.
"""

import math
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantkit.backends.ort import UNSAFE_QDQ_OPTIMIZERS, OrtRunner
from quantkit.compare.metrics import LayerStats, kl_divergence
from quantkit.errors import ConfigError, DataError
from quantkit.precision.plan import Precision, build_plan
from quantkit.precision.fp16_search import (EvalResult, SearchResult, SearchTimeLimit,
                                       linear_evals_needed, max_evals_bound, pareto,
                                       plan_with_fp16, search_fp16_set)
from quantkit.precision.sensitivity import (int8_node_tensors, measured_scores, proxy_scores,
                                            rank)
from quantkit.qdq.casts import convert_fp16
from quantkit.qdq.insert import insert_qdq
from quantkit.verdict import Margin, TestPolicy, paired_signoff

F = TensorProto.FLOAT
WIDTH, CLASSES, LAYERS, FRAGILE, OUTLIER = 64, 16, 6, 3, 7


def chain_model(seed: int = 0) -> onnx.ModelProto:
    """x -> [MatMul -> Add -> Relu] x 5 -> MatMul -> Add -> logits; mm3 is the fragile one."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(LAYERS):
        last = i == LAYERS - 1
        n_out = CLASSES if last else WIDTH
        w = rng.standard_normal((WIDTH, n_out)) * np.sqrt(2.0 / WIDTH)
        b = rng.standard_normal(n_out) * 0.1
        if i == FRAGILE - 1:
            b[OUTLIER] = 300.0  # one huge channel in mm3's input activation
        if i == FRAGILE:
            w[OUTLIER, :] *= 1e-3  # ... that FP32 mm3 hardly uses
        inits += [numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Add", [f"h{i}", f"b{i}"],
                                      ["logits" if last else f"z{i}"], name=f"add{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [f"z{i}"], [f"a{i}"], name=f"relu{i}"))
            x = f"a{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", F, ["N", WIDTH])],
                              [helper.make_tensor_value_info("logits", F, ["N", CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


class Chain:
    """The real pipeline pieces: max-abs calibration, plan, Q/DQ, FP16 casts, ORT, verdict."""

    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.model = chain_model()
        calib = rng.standard_normal((256, WIDTH)).astype(np.float32)
        self.x_eval = rng.standard_normal((2000, WIDTH)).astype(np.float32)
        self.x_subset = self.x_eval[:256]
        acts = ["x"] + [f"a{i}" for i in range(LAYERS - 1)]
        with OrtRunner(self.model, extra_outputs=acts) as r:
            out = r.infer({"x": calib})
        amax = {t: float(np.max(np.abs(out[t]))) for t in acts}
        self.plan = build_plan(self.model, amax=amax, calibrator="max")
        with OrtRunner(self.model) as r:
            self.ref_logits = r.infer({"x": self.x_eval})["logits"]
        self.ref_pred = self.ref_logits.argmax(axis=1)
        noisy = rng.random(len(self.x_eval)) < 0.2  # 20% wrong labels: accuracy ~0.8
        self.y = np.where(noisy, rng.integers(0, CLASSES, len(self.x_eval)), self.ref_pred)
        self.margin = Margin("absolute", 0.03)
        self.full_evals: list[frozenset[str]] = []

    def candidate(self, fp16_set: frozenset[str]) -> onnx.ModelProto:
        plan = plan_with_fp16(self.plan, fp16_set)
        qdq, _ = insert_qdq(self.model, plan)
        return convert_fp16(qdq, plan)

    def logits(self, fp16_set: frozenset[str], x: np.ndarray) -> np.ndarray:
        with OrtRunner(self.candidate(fp16_set), disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS,
                       qdq_mode="exact") as r:
            return r.infer({"x": x})["logits"]

    def damage(self, fp16_set: frozenset[str]) -> float:
        """Mean KL of the candidate's logits vs FP32 on the 256-example subset."""
        return kl_divergence(self.ref_logits[:256], self.logits(fp16_set, self.x_subset))

    def full_eval(self, fp16_set: frozenset[str]) -> EvalResult:
        self.full_evals.append(fp16_set)
        pred = self.logits(fp16_set, self.x_eval).argmax(axis=1)
        verdict = paired_signoff(self.ref_pred == self.y, pred == self.y, margin=self.margin,
                                 policy=TestPolicy(n_boot=1000, seed=0))
        return EvalResult.from_verdict(verdict, fp16=sorted(fp16_set))

    def layer_stats(self) -> dict[str, dict]:
        """LayerStats.result() per tensor: full-INT8 candidate vs FP32 on the subset."""
        outputs, inputs = int8_node_tensors(self.model, self.plan.int8_nodes())
        tensors = list(dict.fromkeys([t for n in outputs for t in inputs[n]]
                                     + list(outputs.values())))
        with OrtRunner(self.model, extra_outputs=tensors) as r, \
                OrtRunner(self.candidate(frozenset()), extra_outputs=tensors,
                          disabled_optimizers=UNSAFE_QDQ_OPTIMIZERS, qdq_mode="exact") as c:
            ref = r.infer({"x": self.x_subset}, tensors)
            cand = c.infer({"x": self.x_subset}, tensors)
        return {t: LayerStats().update(ref[t], cand[t],
                                       amax=self.plan.activation_amax.get(t)).result()
                for t in tensors}


@pytest.fixture(scope="module")
def chain() -> Chain:
    return Chain()


FRAGILE_NODE = f"mm{FRAGILE}"


def test_chain_plan_quantizes_all_six_layers(chain):
    assert chain.plan.int8_nodes() == [f"mm{i}" for i in range(LAYERS)]
    assert chain.plan.activation_amax[f"a{FRAGILE - 1}"] > 100.0


def test_proxy_ranks_the_fragile_layer_first(chain):
    outputs, inputs = int8_node_tensors(chain.model, chain.plan.int8_nodes())
    scores = proxy_scores(chain.layer_stats(), outputs, inputs)
    ranking = rank(scores, order=chain.plan.int8_nodes())
    assert ranking[0] == FRAGILE_NODE
    fragile = scores[FRAGILE_NODE]
    assert fragile["sqnr_out_db"] < 15.0 < fragile["sqnr_in_db"]
    assert fragile["score"] > 100 * max(s["score"] for n, s in scores.items() if n != FRAGILE_NODE)
    # mm0 reads the exact graph input: its dB drop is huge, but it must not outrank mm3
    assert scores["mm0"]["drop_db"] > fragile["drop_db"]


@pytest.mark.parametrize("mode", ["restore", "only"])
def test_measured_scores_rank_the_fragile_layer_first(chain, mode):
    scores = measured_scores(chain.damage, chain.plan.int8_nodes(), mode=mode)
    assert rank(scores)[0] == FRAGILE_NODE
    assert scores.evaluations == LAYERS + 1 and scores.seconds > 0
    assert scores.steps[0]["step"] == "baseline"


def test_search_keeps_exactly_the_fragile_layer_in_fp16(chain):
    outputs, inputs = int8_node_tensors(chain.model, chain.plan.int8_nodes())
    ranking = rank(proxy_scores(chain.layer_stats(), outputs, inputs),
                   order=chain.plan.int8_nodes())
    result = search_fp16_set(ranking, chain.full_eval, max_full_evals=20, max_seconds=600)
    assert result and result.status == "PASS"
    assert result.fp16_nodes == [FRAGILE_NODE] and result.k == 1
    assert [e["status"] for e in result.evaluations] == ["FAIL", "PASS"]
    assert result.evaluations[0]["k"] == 0 and result.evaluations[0]["fp16_set"] == []
    assert not result.budget_exhausted
    assert result.full_evals <= max_evals_bound(LAYERS)
    assert linear_evals_needed(ranking, result.fp16_set) == 2
    assert linear_evals_needed(ranking, result.fp16_set, per_layer_measurement=True) == 8
    # the chosen plan is the artifact to ship: mm3 FP16 with the search's reason
    plan = plan_with_fp16(chain.plan, result.fp16_set)
    assert plan.decisions[FRAGILE_NODE].precision is Precision.FP16
    assert "search" in plan.decisions[FRAGILE_NODE].reason
    assert plan.counts()["int8"] == LAYERS - 1


def test_search_prunes_what_a_wrong_ranking_adds(chain):
    ranking = ["mm0", "mm5", FRAGILE_NODE, "mm1", "mm2", "mm4"]  # fragile ranked third
    result = search_fp16_set(ranking, chain.full_eval, max_full_evals=20, max_seconds=600)
    assert result.status == "PASS" and result.k == 3
    assert result.fp16_nodes == [FRAGILE_NODE]
    assert result.pruned == ["mm5", "mm0"]
    assert result.full_evals <= max_evals_bound(LAYERS)
    # k=0 fail, gallop k=1 fail, k=2 fail, k=4 pass, bisect k=3 pass, prune mm5, prune mm0
    assert [(e["phase"], e["k"], e["status"]) for e in result.evaluations] == [
        ("baseline", 0, "FAIL"), ("gallop", 1, "FAIL"), ("gallop", 2, "FAIL"),
        ("gallop", 4, "PASS"), ("bisect", 3, "PASS"), ("prune", None, "PASS"),
        ("prune", None, "PASS")]


# --------------------------------------------------------------------------- synthetic oracles


class Oracle:
    """PASS iff the FP16 set holds every ``needed`` node; metric = -(missing needed nodes)."""

    def __init__(self, needed) -> None:
        self.needed = frozenset(needed)
        self.calls: list[frozenset[str]] = []

    def __call__(self, fp16: frozenset[str]) -> EvalResult:
        self.calls.append(fp16)
        missing = len(self.needed - fp16)
        return EvalResult("FAIL" if missing else "PASS", -missing, (-missing - 0.5, -missing + 0.5),
                          seconds=0.001)


class WeightOracle:
    """PASS iff the summed damage of the INT8 nodes is <= threshold (monotone in the set)."""

    def __init__(self, damage: dict[str, float], threshold: float) -> None:
        self.damage, self.threshold = damage, threshold

    def __call__(self, fp16: frozenset[str]) -> EvalResult:
        d = sum(v for n, v in self.damage.items() if n not in fp16)
        return EvalResult("PASS" if d <= self.threshold else "FAIL", -d, (-d - 0.1, -d + 0.1))


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def test_bound_holds_over_randomized_monotone_oracles():
    rng = np.random.default_rng(123)
    for L in range(1, 65):
        bound = 2 * math.ceil(math.log2(L)) + 2
        assert max_evals_bound(L) == bound
        ranking = names(L)
        for trial in range(12):
            kind = trial % 4
            if kind == 0:  # a perfect ranking: the needed nodes are a prefix
                needed = ranking[:int(rng.integers(0, L + 1))]
            elif kind == 1:  # any subset of the ranked nodes
                needed = [n for n in ranking if rng.random() < rng.choice([0.05, 0.3, 0.8])]
            elif kind == 2:  # nothing passes: a node outside the ranking is needed
                needed = ranking[:int(rng.integers(0, L + 1))] + ["unranked"]
            else:
                needed = None
            if needed is None:
                damage = {n: float(rng.exponential()) for n in ranking}
                oracle = WeightOracle(damage, float(rng.uniform(0, sum(damage.values()))))
            else:
                oracle = Oracle(needed)
            res = search_fp16_set(ranking, oracle, max_full_evals=1000, max_seconds=math.inf)
            assert res.full_evals <= bound, (L, trial)
            assert not res.budget_exhausted
            sets = [frozenset(e["fp16_set"]) for e in res.evaluations]
            assert len(set(sets)) == len(sets)  # never the same set twice
            if needed is None:
                continue
            passes = "unranked" not in needed
            assert res.status == ("PASS" if passes else "FAIL")
            if passes:
                k_needed = 1 + max((ranking.index(n) for n in needed), default=-1)
                assert res.k == k_needed
                assert set(needed) <= res.fp16_set <= set(ranking[:k_needed])
                if kind == 0:
                    assert res.fp16_nodes == list(needed)
                    # galloping: finding k* costs ~2 log2 k*, not log2 L (pruning comes after)
                    found = [e for e in res.evaluations if e["phase"] != "prune"]
                    assert len(found) <= 2 * math.ceil(math.log2(max(k_needed, 1))) + 2
                assert linear_evals_needed(ranking, res.fp16_set) == k_needed + 1
            else:
                assert res.k is None and res.full_evals <= math.ceil(math.log2(L)) + 2
                assert linear_evals_needed(ranking, None) == L + 1


def test_weight_oracle_without_pruning_returns_the_smallest_passing_prefix():
    rng = np.random.default_rng(7)
    for L in (1, 2, 3, 5, 8, 13, 31, 64):
        ranking = names(L)
        damage = {n: float(v) for n, v in zip(ranking, sorted(rng.exponential(size=L))[::-1])}
        threshold = float(rng.uniform(0, sum(damage.values())))
        oracle = WeightOracle(damage, threshold)
        res = search_fp16_set(ranking, oracle, max_full_evals=100, max_seconds=math.inf,
                              prune=False)
        k_star = next(k for k in range(L + 1) if oracle(frozenset(ranking[:k])).status == "PASS")
        assert res.k == k_star and res.fp16_nodes == ranking[:k_star]
        assert res.full_evals <= 2 * math.ceil(math.log2(L)) + 1 if L > 1 else res.full_evals <= 2


def test_non_monotone_oracle_still_returns_a_measured_pass():
    ranking = names(16)
    passing = {frozenset(ranking[:k]) for k in (4, 9, 16)}  # k=5..8 fail again

    def full_eval(fp16):
        ok = fp16 in passing
        return EvalResult("PASS" if ok else "INCONCLUSIVE", float(len(fp16)), (0.0, 1.0))

    res = search_fp16_set(ranking, full_eval, max_full_evals=100, max_seconds=math.inf,
                          prune=False)
    assert res.status == "PASS" and res.fp16_set in passing
    chosen = next(e for e in res.evaluations if frozenset(e["fp16_set"]) == res.fp16_set)
    assert chosen["status"] == "PASS"


def test_budget_too_small_reports_best_metric_and_exhaustion():
    ranking = names(16)
    oracle = Oracle(ranking[:9])  # needs k=9: 1 + 5 gallop + 3 bisect evaluations
    full = search_fp16_set(ranking, oracle, max_full_evals=100, max_seconds=math.inf)
    assert full.k == 9 and full.fp16_nodes == ranking[:9] and not full.budget_exhausted

    res = search_fp16_set(ranking, Oracle(ranking[:9]), max_full_evals=4, max_seconds=math.inf)
    assert res.budget_exhausted and res.full_evals == 4
    assert "max_full_evals=4" in res.reason and "no PASS" in res.reason
    assert [e["k"] for e in res.evaluations] == [0, 1, 2, 4]
    assert res.status == "FAIL" and res.fp16_nodes == ranking[:4]  # best metric: -5
    assert res.metric == -5.0 and res.k is None and not res

    res = search_fp16_set(ranking, Oracle(ranking[:9]), max_full_evals=6, max_seconds=math.inf)
    assert res.budget_exhausted and res.status == "PASS" and res
    assert res.fp16_nodes == ranking and res.k == 16  # the only PASS so far: all 16
    assert "best PASS so far" in res.reason


def test_budget_exhausted_while_pruning_keeps_the_pass_found():
    ranking = names(8)
    oracle = Oracle(["n1"])  # k* = 2 (n0, n1); pruning would try dropping n0
    res = search_fp16_set(ranking, oracle, max_full_evals=3, max_seconds=math.inf)
    assert [e["phase"] for e in res.evaluations] == ["baseline", "gallop", "gallop"]
    assert res.status == "PASS" and res.fp16_nodes == ["n0", "n1"] and res.k == 2
    assert res.budget_exhausted and "while pruning" in res.reason
    res = search_fp16_set(ranking, Oracle(["n1"]), max_full_evals=4, max_seconds=math.inf)
    assert res.fp16_nodes == ["n1"] and res.pruned == ["n0"] and not res.budget_exhausted


def test_wall_clock_limit_raises_instead_of_returning_a_result():
    oracle = Oracle(["n0"])
    with pytest.raises(SearchTimeLimit, match="wall-clock limit.*precision.search.max_minutes"):
        search_fp16_set(names(4), oracle, max_full_evals=10, max_seconds=0)
    assert oracle.calls == []


class SlowOracle(Oracle):
    """An Oracle whose evaluations take real time (a loaded machine)."""

    def __call__(self, fp16: frozenset[str]) -> EvalResult:
        time.sleep(0.02)
        return super().__call__(fp16)


def test_limit_hit_mid_search_raises_never_a_smaller_answer():
    """A limit that passes after a few evaluations stops the run with the error; it never
    returns the best-so-far set (which would depend on the machine's speed)."""
    with pytest.raises(SearchTimeLimit) as err:
        search_fp16_set(names(32), SlowOracle(names(32)[:9]), max_full_evals=100,
                        max_seconds=0.03)
    assert "no result is reported" in str(err.value)


@pytest.mark.parametrize("max_seconds", [None, math.inf, 3600.0])
def test_seconds_never_change_what_is_found(max_seconds):
    """The evaluation budget decides; a time limit that is not hit changes nothing, and a
    slow evaluation finds exactly what a fast one finds."""
    ranking = names(24)
    fast = search_fp16_set(ranking, Oracle(["n2", "n13"]), max_full_evals=7)
    slow = search_fp16_set(ranking, SlowOracle(["n2", "n13"]), max_full_evals=7,
                           max_seconds=max_seconds)
    key = [[(e["phase"], e["k"], e["status"], tuple(e["fp16_set"])) for e in r.evaluations]
           for r in (fast, slow)]
    assert key[0] == key[1] and fast.fp16_nodes == slow.fp16_nodes
    assert fast.budget_exhausted and slow.budget_exhausted and fast.full_evals == 7


def test_full_int8_pass_needs_one_evaluation_and_empty_ranking_works():
    res = search_fp16_set(names(10), Oracle([]), max_full_evals=10, max_seconds=math.inf)
    assert res.full_evals == 1 and res.fp16_nodes == [] and res.k == 0 and res
    res = search_fp16_set([], Oracle(["x"]), max_full_evals=10, max_seconds=math.inf)
    assert res.full_evals == 1 and res.status == "FAIL" and res.k is None
    assert linear_evals_needed([], None) == 1


def test_search_is_deterministic_and_serializable():
    import json

    ranking = names(20)
    runs = [search_fp16_set(ranking, Oracle(["n3", "n11"]), max_full_evals=50,
                            max_seconds=math.inf) for _ in range(2)]
    strip = [[{k: v for k, v in e.items() if k != "seconds"} for e in r.evaluations]
             for r in runs]
    assert strip[0] == strip[1] and runs[0].fp16_nodes == runs[1].fp16_nodes
    data = json.loads(json.dumps(runs[0].to_dict()))
    assert data["fp16_nodes"] == runs[0].fp16_nodes and data["bound"] == max_evals_bound(20)
    assert isinstance(runs[0], SearchResult)


def test_bad_arguments_raise_config_errors():
    with pytest.raises(ConfigError, match="twice"):
        search_fp16_set(["a", "a"], Oracle([]), max_full_evals=5, max_seconds=1)
    with pytest.raises(ConfigError, match="max_full_evals"):
        search_fp16_set(["a"], Oracle([]), max_full_evals=-1, max_seconds=1)
    with pytest.raises(ConfigError, match="max_seconds"):
        search_fp16_set(["a"], Oracle([]), max_full_evals=5, max_seconds=float("nan"))
    with pytest.raises(DataError, match="status"):
        EvalResult("MAYBE", 0.0, (0.0, 0.0))
    with pytest.raises(DataError, match="EvalResult"):
        search_fp16_set(["a"], lambda s: 0.5, max_full_evals=5, max_seconds=1)
    with pytest.raises(ConfigError, match="not in the ranking"):
        linear_evals_needed(["a"], ["b"])


def test_plan_with_fp16_rejects_nodes_that_are_not_int8(chain):
    with pytest.raises(ConfigError, match="not INT8"):
        plan_with_fp16(chain.plan, {"relu0"})
    assert plan_with_fp16(chain.plan, frozenset()) is chain.plan


# --------------------------------------------------------------------------- pareto


def _ev(i, count, metric, status="FAIL"):
    return {"index": i, "fp16_count": count, "fp16_set": [f"n{j}" for j in range(count)],
            "metric": metric, "status": status, "k": count}


def test_pareto_keeps_only_non_dominated_points():
    evs = [_ev(0, 0, -0.20), _ev(1, 4, -0.01, "PASS"), _ev(2, 2, -0.05),
           _ev(3, 3, -0.06),  # dominated by (2, -0.05)
           _ev(4, 8, -0.01, "PASS"),  # dominated by (4, -0.01): same metric, more nodes
           _ev(5, 6, 0.00, "PASS"), _ev(6, 2, -0.05),  # duplicate of index 2: first kept
           {"index": 7, "fp16_count": 1, "fp16_set": ["n0"], "metric": float("nan")}]
    front = pareto(evs)
    assert [(p["fp16_count"], p["metric"], p["index"]) for p in front] == [
        (0, -0.20, 0), (2, -0.05, 2), (4, -0.01, 1), (6, 0.00, 5)]
    assert front[2]["status"] == "PASS"


def test_pareto_lower_is_better_and_brute_force_agreement():
    rng = np.random.default_rng(5)
    for _ in range(50):
        evs = [_ev(i, int(rng.integers(0, 6)), float(rng.integers(0, 5)))
               for i in range(int(rng.integers(1, 12)))]
        for higher in (True, False):
            s = 1 if higher else -1
            front = pareto(evs, higher_is_better=higher)

            def dominated(e):
                c, m = e["fp16_count"], s * e["metric"]
                return any(o["fp16_count"] <= c and s * o["metric"] >= m
                           and (o["fp16_count"] < c or s * o["metric"] > m) for o in evs)
            expected = {(e["fp16_count"], e["metric"]) for e in evs if not dominated(e)}
            assert {(p["fp16_count"], p["metric"]) for p in front} == expected
            assert len(front) == len(expected)
            assert [p["fp16_count"] for p in front] == sorted(p["fp16_count"] for p in front)


def test_a_set_chosen_by_noise_is_confirmed_or_escalated():
    """The selection data passes k=3 (a lucky draw); the confirmation data needs k=12: the
    search reads its k=3 again there, then escalates through S(6), S(12) and keeps S(12).
    The escalation's full evaluations are the only new ones; confirmations cost none."""
    ranking = names(16)
    selection, confirmation = Oracle(ranking[:3]), Oracle(ranking[:12])
    confirmed_sets = []

    def confirm(fp16):
        confirmed_sets.append(len(fp16))
        return confirmation(fp16)

    res = search_fp16_set(ranking, selection, max_full_evals=100, max_seconds=math.inf,
                          prune=False, confirm=confirm)
    assert confirmed_sets == [3, 6, 12]
    assert res.status == "PASS" and res.fp16_nodes == ranking[:12] and res.k == 12
    assert [c["status"] for c in res.confirmation] == ["FAIL", "FAIL", "PASS"]
    assert [e["phase"] for e in res.evaluations][-2:] == ["escalate", "escalate"]
    assert "confirmed on the held-out half" in res.reason
    assert res.to_dict()["confirmation"][-1]["fp16_count"] == 12
    # the same oracle on both halves: the first set holds, nothing escalates
    same = search_fp16_set(ranking, selection, max_full_evals=100, max_seconds=math.inf,
                           prune=False, confirm=selection)
    assert same.fp16_nodes == ranking[:3] and len(same.confirmation) == 1
    assert not [e for e in same.evaluations if e["phase"] == "escalate"]


def test_no_confirmed_set_keeps_the_best_confirmation_with_its_status():
    ranking = names(8)
    selection = Oracle(ranking[:2])

    def confirm(fp16):  # never PASS; the metric improves with the set's size
        return EvalResult("INCONCLUSIVE", float(len(fp16)), (len(fp16) - 1.0, len(fp16) + 1.0))

    res = search_fp16_set(ranking, selection, max_full_evals=100, max_seconds=math.inf,
                          prune=False, confirm=confirm)
    assert res.status == "INCONCLUSIVE" and res.fp16_nodes == ranking  # S(2), S(4), S(8)
    assert [c["fp16_count"] for c in res.confirmation] == [2, 4, 8]
    assert "not confirmed" in res.reason and not res
    # a budget that stops the escalation says so and keeps what was read
    cut = search_fp16_set(ranking, selection, max_full_evals=4, max_seconds=math.inf,
                          prune=False, confirm=confirm)
    assert cut.budget_exhausted and "escalation stopped" in cut.reason
    assert cut.fp16_nodes == ranking[:4] and len(cut.confirmation) == 2


def test_pruning_leaves_the_escalation_its_evaluations():
    """k*=5 of 16 in 7 evaluations (bound 10); the confirmation needs 10 nodes. Pruning
    stops at 10 - ceil(log2(16 / 5)) = 8 evaluations, so S(10) still fits the budget of 10
    and is confirmed; without a confirmation pruning would use all 10."""
    ranking = names(16)
    res = search_fp16_set(ranking, Oracle(ranking[:5]), max_full_evals=10,
                          max_seconds=math.inf, confirm=Oracle(ranking[:10]))
    phases = [e["phase"] for e in res.evaluations]
    assert phases.count("prune") == 1 and phases[-1] == "escalate" and len(phases) == 9
    assert res.status == "PASS" and res.fp16_nodes == ranking[:10]
    assert "kept for the confirmation's escalation" in res.reason
    plain = search_fp16_set(ranking, Oracle(ranking[:5]), max_full_evals=10,
                            max_seconds=math.inf)
    assert [e["phase"] for e in plain.evaluations].count("prune") == 3
