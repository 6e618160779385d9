"""The run spine refactor changed no record: rerun the frozen configs and compare (issue 14)."""

from __future__ import annotations

import json

import pytest

from record_fixture import CONFIGS, DATA, comparable, run_record


def _expected(before: dict, name: str) -> dict:
    """The before record with the one intended change: the recorded config is what ran.

    Before issue 14, ``target=ort_cpu`` recorded ``precision.remainder: fp16`` although the
    run used the target's forced FP32 remainder."""
    exp = json.loads(json.dumps(before))
    if name == "ort_cpu":
        assert exp["config"]["precision"]["remainder"] == "fp16"
        exp["config"]["precision"]["remainder"] = "fp32"
    return exp


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_record_matches_before_fixture(name, tmp_path):
    before = json.loads((DATA / f"record_before_{name}.json").read_text(encoding="utf-8"))
    after = run_record(tmp_path / "w", name)
    assert isinstance(after.get("schema_version"), int)
    assert comparable(after) == comparable(_expected(before, name))
