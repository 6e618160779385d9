"""Fixtures for the report tests: the trimmed record of a real run (see data/README.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

DATA = Path(__file__).with_name("data")
RECORD_SMALL = DATA / "record_small.json"


@pytest.fixture(scope="session")
def _record_small() -> dict:
    return json.loads(RECORD_SMALL.read_text(encoding="utf-8"))


@pytest.fixture
def record(_record_small) -> dict:
    """A fresh (deep) copy of the real, trimmed record; tests may edit it."""
    return copy.deepcopy(_record_small)


@pytest.fixture(scope="session")
def _record_search() -> dict:
    return json.loads((DATA / "record_search.json").read_text(encoding="utf-8"))


@pytest.fixture
def record_search(_record_search) -> dict:
    """A real, trimmed record with the precision search and its `mixed` candidate."""
    return copy.deepcopy(_record_search)


@pytest.fixture(scope="session")
def _record_signed() -> dict:
    return json.loads((DATA / "record_signed.json").read_text(encoding="utf-8"))


@pytest.fixture
def record_signed(_record_signed) -> dict:
    """A real record with the dev / test sign-off: a recommended family member whose engine
    check has not run (target=tensorrt on ONNX Runtime CPU) and dev-only candidates."""
    return copy.deepcopy(_record_signed)
