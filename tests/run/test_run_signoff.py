"""Stage signoff: the family is declared on dev, each member is evaluated once on test, the
decision is familywise; the record proves which candidates touched test and how often."""

from __future__ import annotations

import pytest

from quantkit.record.run_record import RunRecord
from quantkit.run.stages.record import RunResults, record as assemble_record
from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference
from quantkit.run.stages.signoff import family_members, signoff as sign_off
from quantkit.run.stages.recommend import recommend as recommend_signed
from quantkit.verdict import TestSplitReuse


@pytest.fixture(scope="module")
def signed(ctx, artifacts, evaluations, tmp_path_factory):
    """The sign-off on a ledger of this module's own (looks of other tests do not count)."""
    import dataclasses

    v = dataclasses.replace(ctx.settings.verdict,
                            ledger=str(tmp_path_factory.mktemp("ledger") / "l.sqlite"))
    ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, verdict=v))
    members = family_members(ctx, evaluations, None)
    ref_test = evaluate_reference(ctx, "test")
    return members, ref_test, sign_off(ctx, members, artifacts, evaluations, ref_test), ctx


def test_family_is_fp16_and_the_best_int8_by_dev(ctx, evaluations, signed):
    members, _, so, _ = signed
    from quantkit.compare.ties import DEV_TIE_SHARE

    int8 = [n for n in evaluations if n.startswith("int8.")]
    top = max(evaluations[n].metric("accuracy") for n in int8)
    leader = next(n for n in int8 if evaluations[n].metric("accuracy") == top)
    width = evaluations[leader].test.high - evaluations[leader].test.low
    tied = [n for n in int8 if evaluations[n].metric("accuracy") >= top - DEV_TIE_SHARE * width]
    assert members == ["fp16", tied[0]]  # ties go to the earliest calibrator
    assert sorted(so.family.candidates) == sorted(members)
    assert all(e.split == "test" for e in so.evaluations.values())
    assert all(evaluations[n].split == "dev" for n in members)  # the basis was dev


def test_a_mixed_candidate_without_a_quantized_node_is_not_declared(ctx, artifacts,
                                                                    evaluations, signed):
    from quantkit.run.stages.search import SearchOutcome, declared_mixed

    members = signed[0]
    int8 = next(n for n in artifacts if n.startswith("int8."))

    def outcome(art: str, kept: int) -> SearchOutcome:  # a search that kept `kept` layers
        return SearchOutcome(artifact=artifacts[art], evaluation=evaluations[art],
                             calibrator=int8, fp16_layers=[f"layer{i}" for i in range(kept)],
                             plan_reasons={}, search={})

    mixed = declared_mixed(outcome(int8, 3))
    assert mixed is evaluations[int8]
    assert family_members(ctx, evaluations, mixed) == [*members, "mixed"]
    # the search kept every layer out of INT8: the "mixed" artifact is the fp16 one again
    assert declared_mixed(outcome("fp16", 81)) is None
    # it kept none: the "mixed" artifact is the INT8 candidate again
    assert declared_mixed(outcome(int8, 0)) is None
    assert declared_mixed(None) is None


def test_each_member_is_evaluated_once_on_test_and_a_second_look_is_refused(artifacts, signed):
    members, _, so, _ = signed
    ledger = so.ledger.to_dict()
    assert ledger["evaluated_once"] and ledger["complete"]
    assert [e["candidate"] for e in ledger["evaluations"]] == list(so.family.candidates)
    with pytest.raises(TestSplitReuse):
        so.ledger.record(members[0], n=10)
    with pytest.raises(TestSplitReuse):  # not declared: may not touch test
        so.ledger.record("int8.entropy" if "int8.entropy" not in members else "int8.minmax", n=10)


def test_record_shows_family_order_power_plan_and_test_evidence(ctx, reference, artifacts,
                                                              evaluations, signed):
    members, ref_test, so, ctx = signed
    rec, notes = recommend_signed(ctx, so, artifacts, {}, None)
    res = RunResults(reference=reference, reference_test=ref_test, artifacts=artifacts,
                     evaluations=evaluations, signoff=so, recommendation=rec, notes=notes)
    out = assemble_record(RunRecord(experiment="t", run_dir=str(ctx.run_dir), command="",
                                    config={}, seed=0), res, ctx.run_dir)
    written = out.to_dict()  # record.json as the run writes it
    s = written["signoff"]
    assert s["family"]["candidates"] == list(so.family.candidates)
    # look 1 of this model on these test examples: 0.9 of the declared one-sided alpha
    assert s["alpha_one_sided"] == pytest.approx(0.9 * ctx.settings.verdict.alpha / 2)
    assert s["ledger"]["look"] == 1 and s["ledger"]["earlier_looks"] == []
    assert s["ledger"]["path"] == ctx.settings.verdict.ledger
    assert s["decision"]["look"]["look"] == 1
    assert {r["candidate"] for r in s["power_plan"]["rows"]} == set(members)
    assert all(r["n_available"] == len(ctx.splits.test) for r in s["power_plan"]["rows"])
    for name in members:  # family members carry test evidence, dev under "dev"
        c = written["candidates"][name]
        assert c["split"] == "test" and c["dev"]["split"] == "dev"
        assert c["verdict"]["status"] == so.decision.status(name)
    others = [n for n in artifacts if n not in members]
    assert others and all(out.candidates[n].verdict.split == "dev" for n in others)
    # the tiny world's test split (24) is far below the planned size: nothing passes
    assert out.recommended is None and "none PASSes" in out.recommendation.reason
    # the report shows the declaration, the power plan and the ledger (and computes nothing)
    from quantkit.report.render import render_html, render_markdown

    md = render_markdown(out.to_dict())
    assert "## Sign-off (declared on dev, tested once on test)" in md
    assert " -> ".join(f"`{c}`" for c in so.family.candidates) in md
    assert "each candidate evaluated once" in md and "Power plan" in md
    assert 'id="signoff-family"' in render_html(out.to_dict())


def test_a_re_test_is_another_look_linked_to_the_one_it_replaces(artifacts, evaluations,
                                                                 signed, tiny):
    """``verdict.supersedes``: a re-test names the earlier look's id; it is look 2 of the same
    lineage, charged (tested at 0.09 of the declared alpha), and its record links the two; a
    malformed value is one config error."""
    import dataclasses

    from quantkit.errors import ConfigError
    from runworld import settings_for

    members, ref_test, so, ctx = signed
    earlier = so.look["look_id"]
    v = dataclasses.replace(ctx.settings.verdict, supersedes=earlier[:12])
    c = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, verdict=v))
    again = sign_off(c, members, artifacts, evaluations, ref_test)
    assert again.look["supersedes"] == earlier and again.look["look"] == 2
    assert again.look["look_id"] != earlier and not again.look["read_from_ledger"]
    assert [e["id"] for e in again.look["earlier_looks"]] == [earlier]
    assert again.family.alpha == pytest.approx(0.025 * 0.9 * 0.1)
    assert again.family.to_dict()["supersedes"] == earlier  # the full id, from a prefix
    assert so.family.to_dict()["supersedes"] is None
    with pytest.raises(ConfigError, match="verdict.supersedes"):
        settings_for(tiny, "verdict.supersedes=abc")


def test_a_test_split_decision_outside_the_ledger_is_refused(ctx, artifacts, signed):
    """Cached test outputs cannot be re-decided silently: a paired test on the test split
    needs the look the ledger reserved (sign_off); evaluate() without one refuses."""
    from quantkit.run.evaluation import evaluate_model as evaluate

    members, ref_test, so, _ = signed
    art = artifacts[members[0]]
    with pytest.raises(TestSplitReuse, match="outside the persistent test ledger"):
        evaluate(ctx, art.name, art.path, split="test", reference=ref_test,
                 artifact_sha=art.sha256)
    plain = evaluate(ctx, "fp32", ctx.model.path, split="test")  # FP32 alone decides nothing
    assert plain.test is None


def test_the_int8_member_is_the_one_most_likely_to_pass_on_test(ctx):
    """Two INT8 candidates with dev evidence on 3,000 examples, a test split of 6,000: one
    gains dev accuracy by flipping 9% of FP32's predictions (the churn gate at 10% and the
    paired interval leave it little power on test), the other flips 0.5% and loses a little.
    The family takes the second, whose planned power of the sign-off's rule is higher,
    although its dev accuracy is lower; with the powers tied, the dev accuracy decides."""
    import dataclasses

    import numpy as np

    from quantkit.data.splits import TextSplit
    from quantkit.run.evaluation import Evaluation
    from quantkit.run.stages.signoff import POWER_TIE, planned_powers
    from quantkit.verdict import Margin, churn_gate, paired_signoff, with_gate

    v = ctx.settings.verdict
    n = 3000
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    ref = np.where(rng.random(n) < 0.8, y, 1 - y)  # FP32 right on 80%

    def candidate(name, gains, losses):
        pred = ref.copy()
        pred[np.flatnonzero(ref != y)[:gains]] = y[np.flatnonzero(ref != y)[:gains]]
        hit = np.flatnonzero(ref == y)[:losses]
        pred[hit] = 1 - y[hit]
        test = with_gate(paired_signoff(ref == y, pred == y, margin=Margin(v.margin_kind, v.margin),
                                        candidate=name, policy=ctx.policy),
                         churn_gate(ref, pred, max_flip_rate=0.10, candidate=name,
                                    policy=ctx.policy))
        return Evaluation(name=name, evidence={}, logits=np.eye(2)[pred], split="dev",
                          metrics={"accuracy": float(np.mean(pred == y))}, test=test)

    noisy = candidate("int8.minmax", 140, 130)  # +10 examples, 9% flips
    calm = candidate("int8.percentile", 0, 15)  # -15 examples, 0.5% flips
    assert noisy.metric("accuracy") > calm.metric("accuracy")
    test = TextSplit("test", [f"t{i}" for i in range(6000)], np.zeros(6000, dtype=np.int64))
    big = dataclasses.replace(ctx, splits=dataclasses.replace(ctx.splits, test=test))
    power = planned_powers(big, {"int8.minmax": noisy, "int8.percentile": calm})
    assert power["int8.percentile"] > power["int8.minmax"] + POWER_TIE
    evaluations = {"fp16": calm, "int8.minmax": noisy, "int8.percentile": calm}
    assert family_members(big, evaluations, None) == ["fp16", "int8.percentile"]
    twin = dataclasses.replace(noisy, name="int8.entropy", test=calm.test)  # the same power
    tied = {"fp16": calm, "int8.percentile": calm, "int8.entropy": twin}
    assert family_members(big, tied, None) == ["fp16", "int8.entropy"]
