rule check:
    """Verify one implementation against a float64 reference on the configured check shapes."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/check/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/check/{{kernel}}.log",
    resources:
        gpu=gpu_slots,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/check.py"
