rule ceilings:
    """Measured ceilings of the GPU at hand: FP32 FMA throughput probe and device-to-device copy bandwidth."""
    input:
        env=ENV_JSON,
    output:
        f"{REPORTS}/ceilings.json",
        status=f"{RESULTS}/status/ceilings.json",
    log:
        f"{RESULTS}/logs/ceilings.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/ceilings.py"
