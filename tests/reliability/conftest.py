"""Fixtures for the reliability tests: a tiny real world per test and debris checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tinyworld


@pytest.fixture(scope="session")
def world_template(tmp_path_factory) -> dict:
    return tinyworld.make_world(tmp_path_factory.mktemp("tiny-template"))


@pytest.fixture
def world(world_template, tmp_path) -> dict:
    """A private copy of the tiny world (tokenizer, ONNX model, CSV) with empty output dirs."""
    root = tmp_path / "w"
    shutil.copytree(world_template["root"], root)
    w = {k: (root / Path(v).relative_to(world_template["root"]) if isinstance(v, Path) else v)
         for k, v in world_template.items()}
    w["root"] = root
    for d in ("cache", "stages", "run"):
        shutil.rmtree(w[d], ignore_errors=True)
    return w
