"""FP32 accuracy at chance level: labels that do not mean what the model's classes mean."""

from __future__ import annotations

import numpy as np

from quantkit.data.checks import chance_level_note


def test_a_model_at_chance_gets_a_note_naming_the_fix():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 400)
    predictions = rng.integers(0, 10, 400)  # a head fitted on other classes: guessing
    note = chance_level_note(float(np.mean(labels == predictions)), [str(k) for k in range(10)],
                             split="dev")
    assert note is not None
    assert "10 classes" in note and "data.label_names" in note and "data.label_column=null" in note


def test_a_model_above_chance_gets_none():
    names = ["neg", "pos"]
    assert chance_level_note(0.748, names, split="test") is None  # the sentiment model
    assert chance_level_note(0.56, names, split="test") is None
    assert chance_level_note(0.52, names, split="test") is not None
    assert chance_level_note(None, names, split="test") is None  # label-free
    assert chance_level_note(0.2, ["only"], split="test") is None  # one class: other check
    assert chance_level_note(0.12, [str(k) for k in range(10)], split="dev") is not None
    assert chance_level_note(0.16, [str(k) for k in range(10)], split="dev") is None
