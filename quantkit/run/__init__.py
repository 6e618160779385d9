"""quantkit.run: one run of an experiment.

``quantkit/run/stages/<stage>.py`` holds each stage of the run, a function of the stage's
own name taking the run's :class:`~quantkit.run.context.RunContext` and typed inputs and
returning a typed result; quantkit/app.py calls them in order. The modules beside this file
are the helpers the stages share (the run context, the evaluation of one artifact, the
quantization sources, the build of one artifact, ...). A helper never imports a stage.

The package is also the API's entry point: ``quantkit.run(overrides=[...])`` runs one
experiment and returns its RunRecord (:func:`quantkit.api.run`). A module cannot be called,
so this one's class is swapped for a callable one; everything else about it is an ordinary
package.
"""

from __future__ import annotations

import sys
import types

__all__: list[str] = []


class _RunPackage(types.ModuleType):
    """The package ``quantkit.run``, callable as :func:`quantkit.api.run`."""

    def __call__(self, overrides=(), *, run_dir=None):
        from quantkit.api import run  # the API loads every stage: only when called

        return run(overrides, run_dir=run_dir)


sys.modules[__name__].__class__ = _RunPackage
