"""Records are reproducible and change only on purpose: rerun the frozen tiny-world configs and
compare with the fixtures (tests/run/record_fixture.py says when they were made and why)."""

from __future__ import annotations

import json

import pytest

from record_fixture import CONFIGS, DATA, comparable, run_record


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_record_matches_before_fixture(name, tmp_path):
    before = json.loads((DATA / f"record_before_{name}.json").read_text(encoding="utf-8"))
    after = run_record(tmp_path / "w", name)
    assert isinstance(after.get("schema_version"), int)
    assert comparable(after) == comparable(before)
    if name == "ort_cpu":  # the recorded config is what ran: the target forces FP32
        assert after["config"]["precision"]["remainder"] == "fp32"
