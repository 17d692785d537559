"""The workflow's glue and the core steps.

- ``entry``: the entry point of every workflow script: it runs a rule's step from the module that
  holds it (here, or a feature package: ``dispatch.steps``, ``epilogue.step``, ``profiling.step``,
  ``sanitizers.step``, ``failures.step``, ``report.step``), records its status and turns a failure
  into one line
- ``outcome``: what became of each step, and the run's verdict
- ``io``: result files written atomically and read back checked; ``logs``: a step's log
- ``batches``: which stages share a job (build, check, bench, sweep) and one stage's view of it;
  ``reuse``: a stage's results kept inside a run and reused when nothing its step reads changed
- ``common``: what the steps share (seeds, the concrete spec of an implementation, provenance columns)
- ``environment`` (environment record; environment, ceilings), ``build``, ``points`` (check, bench),
  ``sweep`` (tile sweep): the core steps

A step writes its results and returns None when all is well, or a ``StepStatus`` saying what is wrong
with what it measured (a check that failed, points that did not verify, a tool that is unavailable).
Errors it cannot get past are raised (LabError); ``entry`` turns them into one line and a status.
"""
