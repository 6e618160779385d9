"""tests/run: the run's stages called directly on the tiny world (tests/reliability/tinyworld.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

import tinyworld  # noqa: E402

from runworld import compose_cfg, settings_for  # noqa: E402,F401

from quantkit.app import prepared_context  # noqa: E402
from quantkit.run.scope import quant_scope  # noqa: E402
from quantkit.run.stages.artifacts import artifacts as run_artifacts  # noqa: E402
from quantkit.run.stages.calibration import calibration as run_calibration  # noqa: E402
from quantkit.run.stages.evaluate import evaluate as run_evaluate  # noqa: E402
from quantkit.run.stages.fp16_range_check import fp16_range_check as run_fp16_range_check  # noqa: E402
from quantkit.run.stages.fp32_reference import fp32_reference as run_fp32_reference  # noqa: E402
from quantkit.run.stages.layerwise import layerwise as run_layerwise  # noqa: E402
from quantkit.run.stages.ptq import ptq as run_ptq  # noqa: E402


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    """One tiny world for the whole session (read-only: stages write to their own run dirs)."""
    return tinyworld.make_world(tmp_path_factory.mktemp("tiny-run"))


@pytest.fixture(scope="session")
def ctx(tiny, tmp_path_factory):
    """A prepared RunContext on the tiny world, stage cache off (every stage computes)."""
    s = settings_for(tiny, "stage_cache=false")
    return prepared_context(s, tmp_path_factory.mktemp("tiny-run-dir"))


# -- upstream stage results, computed once per session for the tests of later stages ------
# (each stage function is imported under a name of its own: the fixtures carry the stages' names)

@pytest.fixture(scope="session")
def scope(ctx):
    return quant_scope(ctx, ctx.graph)


@pytest.fixture(scope="session")
def overflow(ctx):
    return run_fp16_range_check(ctx)


@pytest.fixture(scope="session")
def reference(ctx):
    return run_fp32_reference(ctx)


@pytest.fixture(scope="session")
def sources(ctx, scope, overflow, reference):
    return run_ptq(ctx, scope, overflow, reference)


@pytest.fixture(scope="session")
def source(sources):
    """The INT8 source (the recipe's): what the search and the per-layer scope build on."""
    return sources.int8


@pytest.fixture(scope="session")
def calibration(ctx, sources):
    return run_calibration(ctx, sources)


@pytest.fixture(scope="session")
def artifacts(ctx, calibration, overflow, sources):
    return run_artifacts(ctx, calibration, overflow, sources)


@pytest.fixture(scope="session")
def evaluations(ctx, artifacts, reference):
    return run_evaluate(ctx, artifacts, reference)


@pytest.fixture(scope="session")
def layers(ctx, source, artifacts):
    return run_layerwise(ctx, source.scope, artifacts)
