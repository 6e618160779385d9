"""Shared value checks of the settings: plain names, choices, positive numbers, fractions."""

from __future__ import annotations

import re
from typing import Any

from quantkit.errors import ConfigError


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_plain_name(key: str, value: Any) -> None:
    """``value`` names a file or directory: a plain name that cannot leave its parent
    directory (no ``/``, no ``..``, not hidden). ConfigError otherwise."""
    if not isinstance(value, str) or not _PLAIN_NAME.match(value) or ".." in value:
        raise ConfigError(f"config key {key} must be a plain name (it names a directory or "
                          "file, which must stay inside its parent)", where=key, value=value,
                          fix=f"use letters, digits and _ . - only, e.g. {key}=my_experiment")


def _choice(key: str, value: Any, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"config key {key} must be one of {list(allowed)}", value=value,
                          fix=f"set {key}={allowed[0]} (or another listed value)")


def _positive(key: str, value: float | int | None, *, allow_none: bool = False,
              allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"config key {key} must be {'>= 0' if allow_zero else '> 0'}",
                          value=value, fix=f"set {key} to a positive number")


def _fraction(key: str, value: float | None) -> None:
    if value is not None and not 0.0 < value < 1.0:
        raise ConfigError(f"config key {key} must be in (0, 1)", value=value,
                          fix=f"e.g. {key}=0.2")
