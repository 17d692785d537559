rule check:
    """Verify one implementation against a float64 reference on the configured check shapes; a CUDA stage
    also runs under compute-sanitizer (memcheck, racecheck, synccheck, initcheck) at a small shape, at
    the same time (sanitize: false skips it; the table is then empty)."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/check/{{kernel}}.json",
        sanitize=f"{RESULTS}/sanitize/{{kernel}}.csv",
        status=f"{RESULTS}/status/check/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/check/{{kernel}}.log",
    resources:
        gpu=gpu_slots,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/check.py"
