rule environment:
    """Record the GPU and software versions; fails first, with one line, when there is no GPU."""
    output:
        ENV_JSON,
    log:
        f"{RESULTS}/logs/environment.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/environment.py"
