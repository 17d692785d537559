rule check:
    """Verify one implementation against a float64 reference on the configured check shapes (the
    sanitizers run in their own job, workflow/rules/sanitize.smk)."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/check/{{kernel}}.json",
        status=f"{RESULTS}/status/check/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/check/{{kernel}}.log",
    resources:
        gpu=gpu_slots,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/check.py"
