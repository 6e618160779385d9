"""quantkit.run: one run of an experiment.

``quantkit/run/stages/<stage>.py`` holds each stage of the run, a function of the stage's
own name taking the run's :class:`~quantkit.run.context.RunContext` and typed inputs and
returning a typed result; quantkit/app.py calls them in order. The modules beside this file
are the helpers the stages share (the run context, the quantization sources, the build of
one artifact, the evaluation of one artifact, ...). A helper never imports a stage.

``quantkit.run(overrides=[...])`` (quantkit/__init__.py) runs one experiment through the
Python API (quantkit/api.py).
"""
