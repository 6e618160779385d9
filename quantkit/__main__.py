"""``python -m quantkit experiment=bert_int8``: the Hydra entry point. Nothing else lives here,
except the dispatch of the tools in quantkit/cli/: ``quantkit ledger ...`` (the looks at the test
split that the persistent ledger holds), ``quantkit lint MODEL.onnx`` (the Q/DQ rules) and
``quantkit sweep DIR`` (a sweep's comparison report).

Errors become one line on stderr and a non-zero exit code: a QuantkitError (our own checks),
a Hydra / OmegaConf composition error (a typo in a group, key or value), or an OSError while
Hydra or quantkit writes (an unwritable or full output directory). With
``QUANTKIT_ERROR_FILE=<path>`` the error is also written there as JSON (class, what, where,
value, fix, message) for wrappers and tests.

Before Hydra starts, command-line overrides are checked: a ``_target_`` outside ``quantkit.``
is refused (Hydra would instantiate it, e.g. as a callback), and so is an ``experiment_name``
that is not a plain name (it names the run directory under ``experiments/``).
"""

from __future__ import annotations

import os
import re
import sys

import hydra
from omegaconf import DictConfig

from quantkit.settings import register
from quantkit.settings.overrides import check_overrides

register()

ERROR_FILE_ENV = "QUANTKIT_ERROR_FILE"


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from quantkit.app import run, summary_lines
    from quantkit.errors import QuantkitError

    try:
        record = run(cfg)
    except QuantkitError as exc:  # one line, and no Hydra "Error executing job" banner
        _fail(exc)
    for line in summary_lines(record):
        print(line)


def _fail(exc, prefix: str = "error") -> None:
    """Print ``exc`` as one line, write it to $QUANTKIT_ERROR_FILE if set, and exit."""
    sys.stderr.write(f"quantkit: {prefix}: {exc}\n")
    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        import json

        doc = {"class": type(exc).__name__, "what": exc.what, "where": exc.where,
               "value": None if exc.value is None else str(exc.value), "fix": exc.fix,
               "message": str(exc)}
        try:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2)
        except OSError:
            pass  # the error itself is already on stderr
    sys.exit(exc.exit_code)


def _unknown_key_fix(full_key: str) -> str:
    """"did you mean ..." for a key that is not in the schema (by walking the dataclasses)."""
    import dataclasses
    import difflib
    import typing

    from quantkit import settings as schema

    node: object = schema.Settings
    parts = full_key.split(".")
    for part in parts[:-1]:
        fields = {f.name: f for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
        if part not in fields:
            node = None
            break
        hints = typing.get_type_hints(node)
        node = hints.get(part)
    names = [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []
    close = difflib.get_close_matches(parts[-1], names, n=1, cutoff=0.6)
    prefix = ".".join(parts[:-1])
    if close:
        return f"did you mean {prefix + '.' if prefix else ''}{close[0]}? " \
               "(`python -m quantkit --cfg job` lists every key)"
    if names:
        return f"use one of {', '.join(names)} under {prefix or 'the top level'}"
    return "see `python -m quantkit --cfg job` for the valid keys"


def _config_error(exc: BaseException):
    """A Hydra / OmegaConf composition error as one ConfigError (what, where, value, fix)."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    from quantkit.errors import ConfigError, first_line
    from quantkit.settings import omegaconf_message

    cause = exc if isinstance(exc, OmegaConfBaseException) else (exc.__cause__ or exc.__context__)
    head = first_line(exc)
    if isinstance(cause, OmegaConfBaseException):
        key = getattr(cause, "full_key", None)
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
            return ConfigError(f"unknown config key {key}", where=key,
                               value=getattr(cause, "key", None), fix=_unknown_key_fix(key))
        what = omegaconf_message(cause)
        if cause is not exc:
            what += f" ({head})"
        m = re.search(r"Value '([^']*)'", str(cause))
        return ConfigError(what, where=key, value=m.group(1) if m else None, fix="see `python -m quantkit --cfg job` for the "
                           "valid keys and their types")
    if "Available options" in str(exc):
        block = str(exc).split("Available options")[1].split("Config search path")[0]
        options = [ln.strip() for ln in block.splitlines()[1:] if ln.strip()]
        m = re.search(r"Could not find '([^']+)/([^']+)'", str(exc))
        return ConfigError(head, where=m.group(1) if m else None,
                           value=m.group(2) if m else None,
                           fix=f"use one of {', '.join(options)}")
    return ConfigError(head, fix="see `python -m quantkit --help` for the groups and options")


def cli() -> None:
    tool = sys.argv[1:2]
    if tool == ["ledger"]:  # `quantkit ledger ...`: the test ledger, no Hydra
        from quantkit.cli.ledger_cmd import main as ledger_main

        sys.exit(ledger_main(sys.argv[2:]))
    if tool == ["lint"]:  # `quantkit lint MODEL.onnx`: the Q/DQ rules, no Hydra
        from quantkit.cli.lint_cmd import main as lint_main

        sys.exit(lint_main(sys.argv[2:]))
    if tool == ["sweep"]:  # `quantkit sweep DIR`: rebuild a sweep's comparison report
        from quantkit.cli.sweep_cmd import main as sweep_main

        sys.exit(sweep_main(sys.argv[2:]))
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from quantkit.errors import ConfigError, QuantkitError
    from quantkit.fsutil import is_disk_full, write_error

    # Let exceptions reach us so that each becomes exactly one line.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        check_overrides(sys.argv[1:])
        main()
    except QuantkitError as exc:
        _fail(exc)
    except (HydraException, OmegaConfBaseException) as exc:
        _fail(_config_error(exc), "config error")
    except OSError as exc:  # e.g. Hydra creating the run dir under a file or on a full disk
        where = os.fspath(exc.filename) if exc.filename is not None else os.getcwd()
        err = write_error(exc, where)
        if not is_disk_full(exc, where):
            err = ConfigError("file system error", where=where,
                              value=exc.strerror or str(exc) or type(exc).__name__,
                              fix="check that the path exists and is writable (for the run "
                                  "directory: hydra.run.dir=<writable dir>)")
        _fail(err)
    except KeyboardInterrupt:
        sys.stderr.write("quantkit: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    cli()
