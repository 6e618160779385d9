"""benchmarks/verdict_validity.py drives the run's own sign-off path (candidate_test,
family_members, sign_off with its persistent ledger, recommend_signed) on simulated
evaluations: its core, on few simulations, prints one line per row and the summary line,
recommends a lossless candidate often and one that loses 3x the bound almost never."""

from __future__ import annotations

import re
import sys
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
