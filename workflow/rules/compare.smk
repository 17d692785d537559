from sgemm_lab.compare import output_dir

COMPARE_RUNS = config["compare"]["runs"]
COMPARE_DIR = output_dir(COMPARE_RUNS)


rule compare:
    """Target: compare the runs in compare.runs (the first against each later one), e.g.
    snakemake --cores 1 compare --config 'compare={"runs": ["h100", "h200"]}'"""
    input:
        f"{COMPARE_DIR}/compare.md" if len(COMPARE_RUNS) >= 2 else [],
    log:
        f"{RESULTS}/logs/compare_target.log",
    run:
        if len(COMPARE_RUNS) < 2:
            raise WorkflowError("compare: set at least two runs, e.g. --config 'compare={\"runs\": [\"h100\", \"h200\"]}'")
        Path(log[0]).write_text(f"compared: {input[0]}\n")


if len(COMPARE_RUNS) >= 2:

    rule compare_runs:
        """Speed-up of each later run over the first per implementation and shape, with a 95% interval
        from each run's repetitions (sgemm_lab.compare): a table, a markdown page and a figure."""
        input:
            bench=[f"reports/{r}/bench.csv" for r in COMPARE_RUNS],
        output:
            md=f"{COMPARE_DIR}/compare.md",
            csv=f"{COMPARE_DIR}/compare.csv",
            png=f"{COMPARE_DIR}/compare.png",
        log:
            f"{COMPARE_DIR}/compare.log",
        params:
            runs=COMPARE_RUNS,
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/compare.py"
