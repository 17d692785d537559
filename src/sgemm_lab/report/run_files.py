"""The files of a run under ``reports/<run>/`` that the workflow and a drawing of its report both name
(no imports beyond the standard library: the Snakefile reads this at parse time)."""

# The figures of rule plot besides the tile sweeps' heatmaps (figures/sweep_<stage>.png): output name -> file.
FIGURES = {"size": "tflops_vs_size.png", "ladder": "ladder.png", "accuracy": "accuracy.png",
           "roofline": "roofline.png", "levels": "roofline_levels.png", "stalls": "stalls.png", "memory": "memory.png"}

# What a finished run commits and a drawing of its report cannot do without.
RUN_TABLES = ("bench.csv", "check.csv", "build.csv", "environment.json", "ncu_metrics.csv", "sanitize.csv",
              "steps.csv")

# report.md as an HTML fragment beside it, which the HTML report's first page includes
# (workflow/report/workflow.rst).
BODY = "report_body.html"
