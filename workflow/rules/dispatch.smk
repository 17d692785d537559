rule shape_sweep:
    """Every candidate of a per-shape dispatch stage, verified and timed on every shape the stage is timed
    on: the measurements its build turns into the dispatch table."""
    input:
        env=ENV_JSON,
        source=lambda wc: str(LAB.kernel(LAB.kernel(wc.kernel).dispatch_from).source_path),
        headers=kernel_headers(),
    output:
        f"{REPORTS}/dispatch/{{kernel}}.csv",
        status=f"{RESULTS}/status/shape_sweep/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/shape_sweep/{{kernel}}.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/shape_sweep.py"
