rule build:
    """Compile one kernel for the GPU at hand with PyCUDA; record registers, shared and local memory."""
    input:
        source=kernel_source,
        env=ENV_JSON,
    output:
        cubin=f"{RESULTS}/build/{{kernel}}.cubin",
        record=f"{RESULTS}/build/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/build/{{kernel}}.log",
    params:
        kernel_params=lambda wc: dict(LAB.kernel(wc.kernel).params),
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/build.py"
