"""The workflow's glue and the core steps: the top layer, which imports every other (tests/test_layers.py).

- ``entry``: the entry point of every workflow script: it runs a rule's step from the module that
  holds it (here, or a feature package: ``epilogue.step``, ``profiling.step``, ``sanitizers.step``,
  ``failures.step``, ``report.step``), records its status and turns a failure into one line
- ``batches``: which stages share a job (build, check, bench, sweep) and one stage's view of it;
  ``reuse``: a stage's results kept inside a run and reused when nothing its step reads changed
- ``environment`` (environment record; environment, ceilings), ``build``, ``points`` (check, bench),
  ``sweep`` (tile sweep), ``dispatch_steps`` (shape sweep, the build of a dispatch stage): the core steps

What the steps share is one layer down, in ``results`` (files, logs, outcomes, seeds, provenance).

A step writes its results and returns None when all is well, or a ``StepStatus`` saying what is wrong
with what it measured (a check that failed, points that did not verify, a tool that is unavailable).
Errors it cannot get past are raised (LabError); ``entry`` turns them into one line and a status.
"""
