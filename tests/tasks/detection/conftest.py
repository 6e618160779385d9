"""The real detectors (pinned wheel members, extracted into the test session's cache) and one
rendered document page."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def layout_model() -> Path:
    from quantkit.assets import asset_path, cache_root

    return asset_path("layout_cdla", cache_root())


@pytest.fixture(scope="session")
def nudenet_model() -> Path:
    from quantkit.assets import asset_path, cache_root

    return asset_path("nudenet_320n", cache_root())


@pytest.fixture(scope="session")
def layout_page():
    from quantkit.assets import cache_root
    from quantkit.data.layout_pages import render_pages

    return next(render_pages(1, seed=0, n_templates=400, cache_dir=str(cache_root()),
                             start=1))
