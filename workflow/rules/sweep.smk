rule sweep:
    """Tile sweep of one parameterised stage: constraint filter, parallel compiles, verify, time."""
    input:
        env=ENV_JSON,
        source=lambda wc: str(LAB.kernel(wc.kernel).source_path),
    output:
        f"{REPORTS}/sweeps/{{kernel}}.csv",
        status=f"{RESULTS}/status/sweep/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/sweep/{{kernel}}.log",
    params:
        grids=lambda wc: [{k: list(v) for k, v in g.items()} for g in LAB.kernel(wc.kernel).sweep],
    priority: 10  # the autotuned stage (and everything after it) waits for the sweeps
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/sweep.py"

