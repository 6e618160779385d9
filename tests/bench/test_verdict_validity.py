"""benchmarks/verdict_validity.py drives the run's own sign-off path (candidate_test,
family_members, sign_off with its persistent ledger, recommend_signed) on simulated
evaluations: its core, on few simulations, prints one line per row and the summary line,
recommends a lossless candidate often and one that loses 3x the bound almost never."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import verdict_validity as vv  # noqa: E402


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    # conftest.py has already made HOME and QUANTKIT_CACHE private to this session
    return vv.Bench(tmp_path_factory.mktemp("verdict-validity"))


def test_rows_and_summary_line(bench):
    lines: list[str] = []
    res = vv.run(bench, ["accuracy", "kl_n100"], 8, 0, out=lines.append)
    assert len(lines) == 3
    for row, line in zip(("accuracy", "kl_n100"), lines):
        assert re.fullmatch(rf"\s*{row} sims=8 false_pass=[0-9.]+ SE=[0-9.]+ bound=[0-9.]+ "
                            r"(OK|EXCESS) \(\d+ s\)", line), line
    assert re.fullmatch(r"false_pass_recommended=[0-9.]+ worst_row=\w+:[0-9.]+ "
                        r"power_lossless=[0-9.]+ n_test=6000", lines[-1]), lines[-1]
    assert set(res["rows"]) == {"accuracy", "kl_n100"} and res["sims"]["kl_n100"] == 8


def test_lossless_candidates_are_recommended_and_a_3x_loss_is_not(bench):
    lossless = vv.run_row(bench, "accuracy", 25, 1, loss_factor=0.0)
    assert lossless >= 0.6, lossless
    assert vv.run_row(bench, "accuracy", 25, 1, loss_factor=3.0) <= 1 / 25
    assert vv.run_row(bench, "cosine_n500", 15, 1, loss_factor=3.0) == 0.0
    assert vv.run_row(bench, "cosine_n500", 15, 1, loss_factor=0.0) >= 0.6


def test_reruns_are_charged_in_one_ledger(bench):
    """Two experiments on the same test examples and ledger file: the second is look 2,
    tested at the spent share of alpha (the run's ledger, not a copy of its rule)."""
    import numpy as np

    from quantkit.ledger_store import LedgerStore

    rng = np.random.default_rng(5)
    s = bench.row_settings()
    dev, test = vv.draw_accuracy(rng, 300, 0.0), vv.draw_accuracy(rng, 300, 0.0)
    ledger = bench.ledger()
    ids = [vv.experiment(bench.context(s, dev, test, ledger=ledger, seed=k), dev, test,
                         shas=vv._shas(rng)).look_id for k in range(2)]
    looks = [LedgerStore(ledger).look(i) for i in ids]
    assert [lk.number for lk in looks] == [1, 2]


def _looks_of_one_user(bench, monkeypatch, variants):
    """One simulated user's looks (benchmarks/validity_ledger.py's ``_User``), one per
    ``variants`` entry (keyword arguments of ``look``); returns the looks' ledger facts."""
    import numpy as np

    import validity_ledger as vl

    monkeypatch.setenv("XDG_DATA_HOME", os.environ["XDG_DATA_HOME"])  # restored afterwards
    rng = np.random.default_rng(3)
    tally: Counter = Counter()
    user = vl._User(vv, bench, bench.row_settings(), rng, tally)
    facts = []
    for k, kw in enumerate(variants):
        n = len(kw.get("texts") or ()) or 300
        dev, test = vv.draw_accuracy(rng, 300, 0.0), vv.draw_accuracy(rng, n, 0.0)
        ctx = bench.context(bench.row_settings(), dev, test, ledger=None, seed=k,
                            fingerprint=True, **kw)
        facts.append(vv.experiment(ctx, dev, test, shas=vv._shas(rng)).facts)
    assert all(f["location"] == "default" for f in facts)
    assert all(Path(f["path"]).is_relative_to(user.home) for f in facts)
    return facts


def test_a_reexport_is_the_same_model_in_the_users_default_ledger(bench, monkeypatch):
    """The ledger rows' model identity is the run's fingerprint of a real ONNX file: the
    re-exported file has other bytes and is charged as the same model."""
    again = bench.reexported()
    assert again.sha256 != bench.ctx0.model.sha256
    texts = bench.texts(300)
    facts = _looks_of_one_user(bench, monkeypatch, [
        {"texts": texts, "cache_dir": bench.tmp / "c0"},
        {"texts": texts, "model": again, "cache_dir": bench.tmp / "c1"}])
    assert [f["look"] for f in facts] == [1, 2]
    assert facts[0]["model_key"] == facts[1]["model_key"]
    assert [f["joined_by"] for f in facts] == ["first", "overlap"]


def test_respelled_texts_are_the_same_examples_and_fresh_ones_the_same_model(bench,
                                                                              monkeypatch):
    import validity_ledger as vl

    base = vl.accented_texts(300)
    spelled = [{"texts": [vl.text_variant(t, k) for t in base]} for k in range(5)]
    fresh = [{"texts": bench.texts(300, 10_000)}]
    facts = _looks_of_one_user(bench, monkeypatch, spelled + fresh)
    assert [f["look"] for f in facts] == [1, 2, 3, 4, 5, 6]
    assert [f["joined_by"] for f in facts] == ["first", *["overlap"] * 4, "model"]
    assert len({f["lineage"] for f in facts}) == 1


def test_the_ledger_rows_run_through_the_default_ledger(bench, monkeypatch):
    import validity_ledger as vl

    monkeypatch.setenv("XDG_DATA_HOME", os.environ["XDG_DATA_HOME"])
    lines: list[str] = []
    res = vv.run(bench, list(vl.ROWS), 2, 0, out=lines.append)
    assert set(res["rows"]) == set(vl.ROWS)
    notes = [line for line in lines if "looks of 2 users" in line]
    assert len(notes) == 4 and all("model keys 1" in n for n in notes), lines
    assert "fingerprints match" in next(n for n in notes if "files" in n)
