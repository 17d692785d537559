rule sweep:
    """Tile sweep of one parameterised stage: constraint filter, parallel compiles, verify, time."""
    input:
        env=ENV_JSON,
        source=lambda wc: str(LAB.kernel(wc.kernel).source_path),
    output:
        f"{REPORTS}/sweeps/{{kernel}}.csv",
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


rule heatmap:
    """Tile-sweep heatmap of one stage (best TFLOP/s over the parameters not on the axes)."""
    input:
        f"{REPORTS}/sweeps/{{kernel}}.csv",
    output:
        report(
            f"{REPORTS}/figures/sweep_{{kernel}}.png",
            caption="../report/sweep.rst",
            category="Tile sweeps",
            subcategory="{kernel}",
        ),
    log:
        f"{RESULTS}/logs/heatmap/{{kernel}}.log",
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/heatmap.py"
