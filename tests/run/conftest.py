"""tests/run: the run's stages called directly on the tiny world (tests/reliability/tinyworld.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

import tinyworld  # noqa: E402

from runworld import compose_cfg, settings_for  # noqa: E402,F401


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """One tiny world for the whole session (read-only: stages write to their own run dirs)."""
    return tinyworld.make_world(tmp_path_factory.mktemp("tiny-run"))


@pytest.fixture(scope="session")
def ctx(tiny, tmp_path_factory):
    """A prepared RunContext on the tiny world, stage cache off (every stage computes)."""
    from quantkit.run import prepared_context

    s = settings_for(tiny, "stage_cache=false")
    return prepared_context(s, tmp_path_factory.mktemp("tiny-run-dir"))


# -- upstream stage results, computed once per session for the tests of later stages ------

@pytest.fixture(scope="session")
def scope(ctx):
    from quantkit.run import quant_scope

    return quant_scope(ctx)


@pytest.fixture(scope="session")
def overflow(ctx):
    from quantkit.run import check_fp16_range

    return check_fp16_range(ctx)


@pytest.fixture(scope="session")
def source(ctx, scope, overflow):
    from quantkit.run import apply_ptq

    return apply_ptq(ctx, scope, overflow)


@pytest.fixture(scope="session")
def calibration(ctx, source):
    from quantkit.run import calibrate

    return calibrate(ctx, source)


@pytest.fixture(scope="session")
def artifacts(ctx, calibration, overflow, source):
    from quantkit.run import build_artifacts

    return build_artifacts(ctx, calibration, overflow, source)


@pytest.fixture(scope="session")
def reference(ctx):
    from quantkit.run import evaluate_reference

    return evaluate_reference(ctx)


@pytest.fixture(scope="session")
def evaluations(ctx, artifacts, reference):
    from quantkit.run import evaluate_artifact

    return {n: evaluate_artifact(ctx, a, reference) for n, a in artifacts.items()}


@pytest.fixture(scope="session")
def layers(ctx, source, artifacts):
    from quantkit.run import compare_layers

    return compare_layers(ctx, source.scope, artifacts)
