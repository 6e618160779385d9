"""The Python API beside the CLI: the same composition, checks and run as
``python -m quantkit <overrides>``, for notebooks, tests and benchmarks.

    import quantkit
    record = quantkit.run(overrides=["experiment=bert_int8"])   # -> RunRecord
    same = quantkit.load_record(record.run_dir + "/record.json")  # -> RunRecord, any version
    settings = quantkit.configure(["experiment=bert_int8", "seed=1"])  # validated, no run

Overrides are the command line's (``key=value``, ``group=option``); ``hydra.*`` overrides
have no meaning outside the CLI and are refused, except that ``run_dir`` names where the run
lands (default: ``experiments/<experiment_name>/<time>`` under the working directory, as the
CLI's).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from quantkit.errors import ConfigError
from quantkit.record.migrate import load_record as load_any_record
from quantkit.record.run_record import RunRecord
from quantkit.settings import Settings, build, register
from quantkit.settings.overrides import check_overrides

__all__ = ["CONF_DIR", "compose", "configure", "load_record", "run"]

#: the project's Hydra config tree (the CLI's ``config_path="../conf"``)
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The composed config of ``overrides``, checked as the CLI checks its command line."""
    overrides = [str(o) for o in overrides]
    hydra_keys = [o for o in overrides if o.lstrip("+~").startswith("hydra.")]
    if hydra_keys:
        raise ConfigError("hydra.* overrides configure the command line's Hydra app, not a "
                          "Python run", where="overrides", value=hydra_keys[0],
                          fix="drop it; name the run directory with quantkit.run(..., "
                              "run_dir=<dir>)")
    check_overrides(overrides)
    register()
    gh = GlobalHydra.instance()
    outer = gh.hydra if gh.is_initialized() else None  # e.g. called inside a Hydra app
    gh.clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose(config_name="config", overrides=overrides)
    finally:
        gh.clear()
        if outer is not None:
            gh.initialize(outer)


def configure(overrides: Sequence[str] = ()) -> Settings:
    """The validated Settings of ``overrides`` (nothing runs)."""
    return build(compose(overrides))


def run(overrides: Sequence[str] = (), *, run_dir: str | Path | None = None) -> RunRecord:
    """Run one experiment, as ``python -m quantkit <overrides>`` does, and return its record
    (record.json and the reports are written to the run directory)."""
    # app imports every stage: loaded on the first run, so `import quantkit` stays cheap
    from quantkit.app import run as run_app

    cfg = compose(overrides)
    if run_dir is None:
        run_dir = (Path("experiments") / str(cfg.experiment_name)
                   / time.strftime("%Y-%m-%d_%H-%M-%S"))
    command = "quantkit.run(overrides=[" + ", ".join(repr(o) for o in overrides) + "])"
    return run_app(cfg, out_dir=run_dir, command=command)


def load_record(path: str | Path) -> RunRecord:
    """A record.json written by any version of quantkit, read into the RunRecord a run
    returns (the same types write and read it; older schema versions are upgraded by
    quantkit/record/migrate.py)."""
    return load_any_record(path)

