"""Helpers of tests/run: the tiny world's run config composed in-process."""

from __future__ import annotations

import tinyworld

import quantkit


def compose_cfg(world: dict, *extra: str):
    """The tiny world's run config, composed in-process (``quantkit.compose``; the CLI's
    ``hydra.run.dir`` is left out)."""
    args = [a for a in tinyworld.override(tinyworld.cli_args(world), *extra)
            if not a.startswith("hydra.")]
    return quantkit.compose(args)


def settings_for(world: dict, *extra: str):
    """The tiny world's validated Settings (``quantkit.configure``)."""
    args = [a for a in tinyworld.override(tinyworld.cli_args(world), *extra)
            if not a.startswith("hydra.")]
    return quantkit.configure(args)
