rule profile:
    """Nsight Compute metrics of one GPU implementation at the profile shapes (tidy CSV; the .ncu-rep
    is kept next to it for the Nsight Compute GUI). Unavailable counters become a status, not a failure."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/profile/{{kernel}}.csv",
        status=f"{RESULTS}/status/profile/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/profile/{{kernel}}.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/profile.py"


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
