# SGEMM optimisation lab: build, verify, time and report every kernel of the ladder against cuBLAS.
#   snakemake --cores 1                  everything (needs an NVIDIA GPU)
#   snakemake -n                         what would run (no GPU needed)
# The kernel list lives in config/config.yaml; no rule names a kernel.

from snakemake.utils import min_version

min_version("9.0")


include: "workflow/rules/configfiles.smk"


configfile: BASE_CONFIG


include: "workflow/rules/common.smk"


# Under --software-deployment-method apptainer every job runs in the image the config names (a .sif
# built from docker/Dockerfile; GPU jobs need --apptainer-args "--nv"); without one, on the host.
if config.get("container"):

    container: config["container"]


# The page `snakemake --report` opens on: the run's report.md itself (reports/<run>/report_body.html).
report: "workflow/report/workflow.rst"


include: "workflow/rules/environment.smk"
include: "workflow/rules/build.smk"
include: "workflow/rules/check.smk"
include: "workflow/rules/sanitize.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/dispatch.smk"
include: "workflow/rules/epilogue.smk"
include: "workflow/rules/ceilings.smk"
include: "workflow/rules/failures.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/rerender.smk"
include: "workflow/rules/time.smk"


# Jobs a cluster executor runs where Snakemake runs, not as jobs of their own: the targets, and the
# tables, figures and report (seconds of CPU each; a cluster job's own start costs about 5 s).
localrules:
    all,
    compare,
    rerender,
    aggregate,
    plot,
    report,


rule all:
    """The report. This rule has a command and no output, so it runs on every invocation, even when
    everything is up to date: the run's verdict (onsuccess in common.smk) is then always given."""
    default_target: True
    input:
        report=final_outputs(),
    log:
        f"{RESULTS}/logs/all.log",
    conda:
        "env/conda.yaml"
    shell:
        "echo 'report: {input.report}' > {log}"
