rule sanitize:
    """compute-sanitizer memcheck, racecheck, synccheck and initcheck on one kernel at a small shape."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/sanitize/{{kernel}}.csv",
    log:
        f"{RESULTS}/logs/sanitize/{{kernel}}.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/sanitize.py"
