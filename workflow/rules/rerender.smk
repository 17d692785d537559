from sgemm_lab.report.run_files import RUN_TABLES

RERENDER = config["rerender"]
if RERENDER and RERENDER == RUN:
    raise WorkflowError(f"rerender={RERENDER} draws the committed run reports/{RERENDER} again; "
                        f"run={RUN} would make it this invocation's own run: leave run= out")


if RERENDER:

    rule rerender:
        """Target: a finished run's figures, report.md and HTML report (reports/<run>/report.html, not
        tracked) drawn again from the tables it committed under reports/<run>/, on any machine: no GPU,
        no results/. Always runs (no output Snakemake could find up to date), so that a change to the
        report's code shows in the drawing at once:
        snakemake --cores 1 rerender --config rerender=h100"""
        input:
            tables=[f"reports/{RERENDER}/{name}" for name in RUN_TABLES],
        log:
            f"{RESULTS}/logs/rerender_{RERENDER}.log",
        threads: all_cores()  # the figures drawn side by side
        params:
            run_dir=f"reports/{RERENDER}",
            configfiles=[path for path, _ in CONFIG_FILES[1:]],
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/rerender.py"

else:

    rule rerender:
        """Target: see above; it needs the run to draw."""
        log:
            f"{RESULTS}/logs/rerender.log",
        run:
            raise WorkflowError("rerender: name the committed run to draw again, e.g. "
                                "snakemake --cores 1 rerender --config rerender=h100")
