"""The report: everything in it is read from the tidy results files.

- ``sections``: the markdown report, one function per section (``render``)
- ``summary``: the first screen: per class of shapes, the stage to use in each race; the contents
- ``tables``: the markdown tables of the measurements (ladder, suite, headline, accuracy, SASS, ...)
- ``numbers``: how a measured number is written (units, digits) and marked when it was unsteady
- ``stage_tables``: a stage's tile sweep, dispatch table, Nsight Compute metrics and traffic model
- ``problems``: failed steps, disturbed points, the GPU failure cases
- ``accuracy``: the accuracy tables (class power, input distributions)
- ``plots``, ``profile_plots``: the seaborn figures (timings and accuracy; roofline, stalls, memory)
- ``compare``: comparing runs: speed-ups with intervals, verdicts, drift relative to cuBLAS
- ``run_files``: the files of a run that the workflow and a drawing of its report both name
- ``html``: report.md as the HTML fragment the HTML report opens on
- ``step``: the aggregate, plot, report and rerender steps
"""
