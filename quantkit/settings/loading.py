"""build(): composed config -> validated Settings; the target's overrides; OmegaConf errors."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from quantkit.errors import ConfigError, first_line
from quantkit.settings.cross_checks import validate
from quantkit.settings.settings_schema import Settings


def build(cfg: DictConfig | dict) -> Settings:
    """Composed config -> validated :class:`Settings`. One ConfigError line on any problem."""
    try:
        schema = OmegaConf.structured(Settings)
        merged = OmegaConf.merge(schema, cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg))
        obj = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(omegaconf_message(exc),
                          fix="see `python -m quantkit --cfg job` for the valid keys") from exc
    assert isinstance(obj, Settings)
    return apply_target(validate(obj))


def target_overrides(s: Settings) -> dict[str, Any]:
    """What the deployment target forces, as dotted config keys -> values: target=ort_cpu
    runs the remainder in FP32 (ONNX Runtime CPU has no fast FP16 kernels). The run record's
    config has these written in, so it shows the configuration that ran."""
    return {"precision.remainder": "fp32"} if s.target == "ort_cpu" else {}


def apply_target(s: Settings) -> Settings:
    """Apply :func:`target_overrides` to ``s`` (logged; the run record notes it)."""
    for dotted, value in target_overrides(s).items():
        *parents, leaf = dotted.split(".")
        node = s
        for key in parents:
            node = getattr(node, key)
        if getattr(node, leaf) != value:
            import logging

            logging.getLogger("quantkit.settings").info(
                "target=%s: %s %s -> %s", s.target, dotted, getattr(node, leaf), value)
            setattr(node, leaf, value)
    return s


def omegaconf_message(exc: BaseException) -> str:
    """One line from an OmegaConf error: the key, then what was wrong."""
    key = getattr(exc, "full_key", None)
    first = first_line(exc)
    if "could not be converted to" in first or "Value '" in first:
        first = first.replace(" of type 'str'", "")
    return f"config key {key}: {first}" if key else first
