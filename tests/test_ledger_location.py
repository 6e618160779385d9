"""Where the test ledger lives (quantkit/ledger_location.py): the user data dir by default,
apart from every cache; verdict.ledger names another; verdict.ledger_path still works, with a
log line; the cache's ledger of earlier versions is copied to the default place once. Every
test here runs in the session's private HOME (tests/conftest.py) and its own XDG_DATA_HOME."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from pathlib import Path

import pytest

import quantkit
from quantkit.ledger_location import (adopt_legacy, default_ledger, ledger_location,
                                      user_data_dir)
from quantkit.ledger_store import LedgerStore

from test_ledger_store import _decide, _reserve


def _settings(*overrides):
    return quantkit.configure(["experiment=bert_int8", *overrides])


def test_tests_never_see_the_real_home():
    """tests/conftest.py points HOME and XDG_DATA_HOME at a private temporary directory."""
    home = Path.home()
    assert "quantkit-tests-home-" in str(home)
    assert str(default_ledger()).startswith(str(home))


def test_the_default_is_the_user_data_dir_and_no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_ledger() == tmp_path / "data" / "quantkit" / "ledger.sqlite"
    where = ledger_location(_settings(f"cache_dir={tmp_path / 'cache'}"))
    assert where.chosen_by == "default" and where.path == default_ledger().resolve()
    assert "cache" not in where.path.parts
    for unusable in ("", "relative/dir"):  # the XDG rule: only an absolute path counts
        monkeypatch.setenv("XDG_DATA_HOME", unusable)
        assert user_data_dir() == Path.home() / ".local" / "share"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_ledger() == Path.home() / ".local" / "share" / "quantkit" / "ledger.sqlite"


def test_verdict_ledger_names_another_and_ledger_path_is_its_deprecated_alias(tmp_path, caplog):
    team = tmp_path / "team.sqlite"
    named = ledger_location(_settings(f"verdict.ledger={team}"))
    assert named.path == team and named.chosen_by == "verdict.ledger"
    with caplog.at_level(logging.WARNING, logger="quantkit.ledger_location"):
        old = ledger_location(_settings(f"verdict.ledger_path={team}"))
    assert old.path == team and old.chosen_by == "verdict.ledger_path (deprecated)"
    assert "verdict.ledger_path is deprecated" in caplog.text and f"verdict.ledger={team}" \
        in caplog.text


def test_the_cache_ledger_of_earlier_versions_is_copied_once(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    cache = tmp_path / "cache"
    old = LedgerStore(cache / "ledger.sqlite")
    first = _reserve(old, range(100), "k1")
    _decide(old, first, "PASS")
    where = ledger_location(_settings(f"cache_dir={cache}"))
    assert adopt_legacy(where, cache) == (cache / "ledger.sqlite").resolve()
    (look,) = LedgerStore(where.path).looks()
    assert look.id == first.look.id and look.statuses() == {"fp16": "PASS", "int8": "PASS"}
    assert adopt_legacy(where, cache) is None  # once: the default exists now
    assert "holds" not in caplog.text  # the copy holds every look: nothing to warn about
    _reserve(old, range(100), "k2")  # an older quantkit writes the cache's file again
    with caplog.at_level(logging.WARNING, logger="quantkit.ledger_location"):
        assert adopt_legacy(where, cache) is None
    assert "holds 1 look(s)" in caplog.text and f"verdict.ledger={cache.resolve()}" \
        in caplog.text
    named = dataclasses.replace(where, chosen_by="verdict.ledger")  # a named ledger: as named
    assert adopt_legacy(named, cache) is None
    junk = tmp_path / "junk-cache"
    junk.mkdir()
    (junk / "ledger.sqlite").write_bytes(b"not a ledger" * 100)  # skipped, not an error
    fresh = dataclasses.replace(where, path=tmp_path / "data2" / "ledger.sqlite")
    assert adopt_legacy(fresh, junk) is None and not fresh.path.exists()


def test_a_file_that_is_not_a_ledger_is_one_error_before_any_work(tmp_path):
    bad = tmp_path / "ledger.sqlite"
    bad.write_bytes(bytes(range(256)) * 40)
    from quantkit.errors import LedgerError

    with pytest.raises(LedgerError) as err:
        LedgerStore(bad).check()
    msg = str(err.value)
    assert "not a readable quantkit ledger" in msg and str(bad) in msg and "Fix:" in msg
    with sqlite3.connect(tmp_path / "other.sqlite") as con:
        con.execute("CREATE TABLE things (x)")
    with pytest.raises(LedgerError, match="not a quantkit test ledger"):
        LedgerStore(tmp_path / "other.sqlite").check()
