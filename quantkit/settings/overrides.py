"""Command-line overrides refused before Hydra acts on them (the CLI and quantkit.run).

A ``_target_`` outside ``quantkit.`` is refused (Hydra would instantiate it, e.g. as a
callback), and so is an ``experiment_name`` that is not a plain name (it names the run
directory under ``experiments/``) and a ``target.*`` key (``target`` is the deployment
target's name; the target GPU is ``gpu.sm``).
"""

from __future__ import annotations

import re

from quantkit.errors import ConfigError
from quantkit.settings.value_checks import check_plain_name

__all__ = ["check_overrides"]


_OVERRIDE = re.compile(r"^[+~]*(?P<key>[A-Za-z0-9_.@/\[\]-]+)=(?P<value>.*)$")


def check_overrides(argv: list[str]) -> None:
    """Refuse dangerous command-line overrides before Hydra acts on them (ConfigError)."""
    for arg in argv:
        m = _OVERRIDE.match(arg)
        if not m:
            continue
        key, value = m.group("key"), m.group("value").strip().strip("'\"")
        if key == "_target_" or key.endswith("._target_"):
            if not value.startswith("quantkit."):
                raise ConfigError("only quantkit.* targets may be instantiated", where=key,
                                  value=value, fix="point _target_ at a quantkit class or "
                                  "function, or remove the override")
        if key == "experiment_name":
            check_plain_name("experiment_name", value)
        if key.startswith("target."):  # target is the deployment target's name
            raise ConfigError("target is the deployment target's name (tensorrt | ort_cpu); "
                              "the target GPU is gpu.sm", where=key, value=value,
                              fix=f"write gpu.sm={value} (a compute capability or a GPU name)")
