from sgemm_lab.report.compare import output_dir

COMPARE_RUNS = config["compare"]["runs"]
COMPARE_DIR = output_dir(COMPARE_RUNS)


rule compare:
    """Target: compare the runs in compare.runs (the first against each later one), e.g.
    snakemake --cores 1 compare --config 'compare={"runs": ["h100", "h200"]}'

    It reads the runs' tables again: when compare_runs refuses a damaged table, Snakemake puts the
    previous comparison back (update() below) and records it as made from the refused table, so that a
    later invocation finds it up to date; this check names the table on every run until it is fixed."""
    input:
        md=f"{COMPARE_DIR}/compare.md" if len(COMPARE_RUNS) >= 2 else [],
        bench=[f"reports/{r}/bench.csv" for r in COMPARE_RUNS] if len(COMPARE_RUNS) >= 2 else [],
    log:
        f"{RESULTS}/logs/compare_target.log",
    run:
        from sgemm_lab.report.compare import target

        problem = target(COMPARE_RUNS, input.bench, md=input.md, log=log[0])
        if problem:
            raise WorkflowError(problem)


if len(COMPARE_RUNS) >= 2:

    rule compare_runs:
        """Speed-up of each later run over the first per implementation and shape, with a 95% interval
        from each run's repetitions (sgemm_lab.report.compare): a table, a markdown page and a figure."""
        input:
            bench=[f"reports/{r}/bench.csv" for r in COMPARE_RUNS],
            # checked against the tables' rows (sgemm_lab.report.compare.one_run), where a run has one
            env=[p for p in (f"reports/{r}/environment.json" for r in COMPARE_RUNS) if Path(p).exists()],
        # update(): Snakemake neither deletes these before the job nor keeps a failed job's; it backs
        # them up and restores them when the job fails (a damaged table never costs the last comparison)
        output:
            md=update(f"{COMPARE_DIR}/compare.md"),
            csv=update(f"{COMPARE_DIR}/compare.csv"),
            png=update(f"{COMPARE_DIR}/compare.png"),
        log:
            f"{COMPARE_DIR}/compare.log",
        params:
            runs=COMPARE_RUNS,
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/compare.py"
