rule aggregate:
    """Tidy tables over all implementations: bench.csv (one row per measurement), check.csv, build.csv."""
    input:
        bench=all_bench(),
        check=all_checks(),
        build=all_builds(),
        profiles=all_profiles(),
        env=ENV_JSON,
    output:
        bench=f"{REPORTS}/bench.csv",
        ncu=f"{REPORTS}/ncu_metrics.csv",
        check=f"{REPORTS}/check.csv",
        build=f"{REPORTS}/build.csv",
        env=f"{REPORTS}/environment.json",
    log:
        f"{RESULTS}/logs/aggregate.log",
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/aggregate.py"


rule plot:
    """TFLOP/s against size for every stage, cuBLAS as the reference line."""
    input:
        bench=f"{REPORTS}/bench.csv",
    output:
        report(
            f"{REPORTS}/figures/tflops_vs_size.png",
            caption="../report/tflops_vs_size.rst",
            category="Size sweep",
        ),
    log:
        f"{RESULTS}/logs/plot.log",
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/plot.py"


rule report:
    """The markdown report comparing every stage with cuBLAS."""
    input:
        bench=f"{REPORTS}/bench.csv",
        check=f"{REPORTS}/check.csv",
        build=f"{REPORTS}/build.csv",
        env=f"{REPORTS}/environment.json",
        sweeps=all_sweeps(),
        epilogues=all_epilogues(),
        ncu=f"{REPORTS}/ncu_metrics.csv",
        ceilings=f"{REPORTS}/ceilings.json",
        figure=f"{REPORTS}/figures/tflops_vs_size.png",
        heatmaps=all_heatmaps(),
    output:
        f"{REPORTS}/report.md",
    log:
        f"{RESULTS}/logs/report.log",
    params:
        start=START_JSON,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/report.py"
