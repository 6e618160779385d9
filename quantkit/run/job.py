"""Where and how a run ran: its Hydra launcher, the worker host, and its attempt in its run dir.

``record.job`` (see :func:`job_facts`) lets a sweep report say which launcher ran each job, on
which host, and which jobs ran again: a sweep whose worker was lost is finished by running the
same command again; each job of the rerun reads what it finished before from the stage cache,
and its record says whether this is a later attempt and whether the earlier one finished.

Attempts are counted in ``<run dir>/<hydra output subdir>/quantkit_attempts.jsonl`` (Hydra's
own ``.hydra`` folder of that job, which holds how the job was started), one line per start.
Without Hydra's output subdir (``hydra.output_subdir=null``, or ``run()`` called directly)
nothing is written and ``attempt`` is None.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

__all__ = ["ATTEMPTS_NAME", "job_facts", "launcher_name"]

log = logging.getLogger(__name__)

ATTEMPTS_NAME = "quantkit_attempts.jsonl"


def launcher_name(target: str | None) -> str | None:
    """A launcher's short name from its ``_target_`` (``...ray_launcher.RayLauncher`` ->
    ``RayLauncher``), or None."""
    return target.rsplit(".", 1)[-1] if target else None


def _hydra_job() -> tuple[str | None, Path | None]:
    """(the launcher's ``_target_``, the job's Hydra output subdir) when Hydra runs this job."""
    if not HydraConfig.initialized():
        return None, None
    hc = HydraConfig.get()
    target = hc.launcher.get("_target_") if hc.get("launcher") is not None else None
    sub = hc.get("output_subdir")
    out = Path(hc.runtime.output_dir) / sub if sub else None
    return (str(target) if target else None), out


def job_facts(run_dir: Path) -> dict[str, Any]:
    """``{"launcher", "worker_host", "pid", "attempt", "earlier_finished"}`` for this run.

    ``attempt``: 1 for the first start in ``run_dir``, n for the n-th (None when untracked);
    ``earlier_finished``: whether ``run_dir`` held a finished record when this run started
    (False on a first attempt). Records this start in the attempts file.
    """
    target, subdir = _hydra_job()
    facts: dict[str, Any] = {"launcher": launcher_name(target),
                             "worker_host": socket.gethostname(), "pid": os.getpid(),
                             "attempt": None,
                             "earlier_finished": (run_dir / "record.json").is_file()}
    if subdir is None or not subdir.is_dir():
        return facts
    path = subdir / ATTEMPTS_NAME
    try:
        earlier = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        line = json.dumps({"host": facts["worker_host"], "pid": facts["pid"],
                           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "launcher": facts["launcher"]}) + "\n"
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError as e:  # the count informs the sweep report; it never stops a run
        log.warning("could not count this run's attempts in %s (%s)", path, e.strerror or e)
        return facts
    facts["attempt"] = len([ln for ln in earlier if ln.strip()]) + 1
    return facts
