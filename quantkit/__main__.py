"""``python -m quantkit experiment=bert_int8``: the Hydra entry point. Nothing else lives here.

Errors become one line on stderr and a non-zero exit code: a QuantkitError (our own checks)
or a Hydra / OmegaConf composition error (a typo in a group, key or value).
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from quantkit.settings import register

register()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from quantkit.app import run, summary_lines
    from quantkit.errors import QuantkitError

    try:
        record = run(cfg)
    except QuantkitError as exc:  # one line, and no Hydra "Error executing job" banner
        sys.stderr.write(f"quantkit: error: {exc}\n")
        sys.exit(exc.exit_code)
    for line in summary_lines(record):
        print(line)


def _one_line(exc: BaseException) -> str:
    from omegaconf.errors import OmegaConfBaseException

    from quantkit.settings import omegaconf_message

    cause = exc.__cause__ or exc.__context__
    head = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OmegaConfBaseException):
        return omegaconf_message(exc)
    if isinstance(cause, OmegaConfBaseException):
        return f"{omegaconf_message(cause)} ({head})"
    if "Available options" in str(exc):
        block = str(exc).split("Available options")[1].split("Config search path")[0]
        options = [ln.strip() for ln in block.splitlines()[1:] if ln.strip()]
        return f"{head}. Fix: use one of {', '.join(options)}"
    return head


def cli() -> None:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from quantkit.errors import QuantkitError

    # Let exceptions reach us so that each becomes exactly one line.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        main()
    except QuantkitError as exc:
        sys.stderr.write(f"quantkit: error: {exc}\n")
        sys.exit(exc.exit_code)
    except (HydraException, OmegaConfBaseException) as exc:
        sys.stderr.write(f"quantkit: config error: {_one_line(exc)}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("quantkit: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    cli()
