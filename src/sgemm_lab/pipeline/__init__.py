"""The pipeline's step bodies, one module per rule file; ``sgemm_lab.entry`` runs them by rule name.

``environment`` (environment, ceilings), ``build``, ``points`` (check, bench), ``sweep``, ``epilogue``,
``profile``, ``sanitize``, ``failures`` (failure_tests) and ``report`` (aggregate, plot, report,
rerender); ``common`` holds what they share (seeds, the concrete spec of an implementation, provenance
columns), ``run_files`` the files of a run that the workflow and the report both name. The shape sweep
and the build of a dispatch stage are in ``sgemm_lab.dispatch_steps``.

A step writes its results and returns None when all is well, or a ``StepStatus`` saying what is wrong
with what it measured (a check that failed, points that did not verify, a tool that is unavailable).
Errors it cannot get past are raised (LabError); ``entry`` turns them into one line and a status.
"""
