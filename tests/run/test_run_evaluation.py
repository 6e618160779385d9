"""Stage evaluate: task evidence, paired verdicts against FP32, and its cache."""

from __future__ import annotations

import dataclasses

import numpy as np

from quantkit.cache import StageCache
from quantkit.run.evaluation import evaluate_artifact, numerics_note


def test_reference_evidence(ctx, reference):
    ev = reference.to_record()
    assert ev["n"] == len(ctx.splits.dev) and reference.logits.shape == (ev["n"], 2)
    assert ev["metrics"]["accuracy"] > 0.8  # the tiny model separates the classes
    assert "verdict" not in ev and reference.engine is None


def test_candidates_carry_a_verdict_against_fp32(evaluations, reference):
    for name, ev in evaluations.items():
        assert ev.test.status == ev.to_record()["verdict"]["status"] in ("PASS", "FAIL", "INCONCLUSIVE"), name
        pred, ref = ev.logits.argmax(1), reference.logits.argmax(1)
        assert ev.evidence["agreement_fp32"] == float((pred == ref).mean())
    assert "emulated" in evaluations["int8.mse"].evidence["numerics"]


def test_evaluations_are_cached_per_artifact(ctx, artifacts, reference, tmp_path):
    c = dataclasses.replace(ctx, cache=StageCache(tmp_path / "stages"))
    first = evaluate_artifact(c, artifacts["int8.entropy"], reference)
    again = evaluate_artifact(c, artifacts["int8.entropy"], reference)
    assert not first.cached and again.cached
    assert again.evidence == first.evidence and np.array_equal(again.logits, first.logits)


def test_numerics_note_names_the_target(ctx):
    s = dataclasses.replace(ctx.settings, target="ort_cpu")
    assert "not a TensorRT prediction" in numerics_note("int8.mse", s)
    assert numerics_note("fp32", ctx.settings) == "FP32 on ONNX Runtime CPU"


def test_fp32_at_chance_level_on_the_data_is_a_record_note(ctx):
    """Labels that do not mean the model's classes (here: the dev labels flipped) put FP32
    below chance: the reference evaluation carries a note for record.notes."""
    import dataclasses

    from quantkit.data.splits import TextSplit
    from quantkit.run.stages.fp32_reference import fp32_reference as evaluate_reference

    dev = ctx.splits.dev
    flipped = TextSplit(dev.name, list(dev.texts), 1 - dev.labels, list(dev.groups))
    c = dataclasses.replace(ctx, splits=dataclasses.replace(ctx.splits, dev=flipped),
                            cache=None)
    ref = evaluate_reference(c, "dev")
    assert ref.metric("accuracy") < 0.5
    assert ref.notes and "chance" in ref.notes[0]
    assert evaluate_reference(ctx, "dev").notes == ()  # the real labels: no note
