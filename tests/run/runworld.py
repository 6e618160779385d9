"""Helpers of tests/run: the tiny world's run config composed in-process."""

from __future__ import annotations

from pathlib import Path

import tinyworld

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose_cfg(world: dict, *extra: str):
    """The tiny world's run config, composed in-process (no Hydra run dir override)."""
    from hydra import compose, initialize_config_dir

    from quantkit.settings import register

    register()
    args = [a for a in tinyworld.override(tinyworld.cli_args(world), *extra)
            if not a.startswith("hydra.")]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=args)


def settings_for(world: dict, *extra: str):
    from quantkit.settings import build

    return build(compose_cfg(world, *extra))
