rule failure_tests:
    """The GPU half of the bad-input catalogue (pytest tests/gpu) on this GPU: one row per case with its
    outcome, for the report's method section. The tests' own jobs take the GPU lock as the pipeline's do."""
    input:
        env=ENV_JSON,
    output:
        f"{REPORTS}/failure_tests.csv",
        status=f"{RESULTS}/status/failure_tests.json",
    log:
        f"{RESULTS}/logs/failure_tests.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/failure_tests.py"
