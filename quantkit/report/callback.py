"""Hydra callback: when a sweep (``-m``) ends, write its comparison report into the sweep dir."""

from __future__ import annotations

import logging

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class SweepReport(Callback):
    """``on_multirun_end``: rank every job's record into sweep.md / sweep.html."""

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        from quantkit.errors import QuantkitError
        from quantkit.report.sweep_dir import rebuild

        sweep_dir = config.hydra.sweep.dir
        try:
            paths = rebuild(sweep_dir)
        except QuantkitError as exc:  # a failed sweep still ends; say why there is no report
            log.warning("no sweep comparison report: %s", exc)
            return
        for fmt, path in paths.items():
            log.info("sweep comparison report (%s): %s", fmt, path)
