rule build:
    """Compile one stage for the machine at hand (PyCUDA for kernels, the C compiler for host stages);
    record registers, shared and local memory. An autotuned stage first picks its configuration."""
    input:
        unpack(build_inputs),
    output:
        binary=f"{RESULTS}/build/{{kernel}}.bin",
        record=f"{RESULTS}/build/{{kernel}}.json",
        status=f"{RESULTS}/status/build/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/build/{{kernel}}.log",
    params:
        kernel_params=lambda wc: dict(LAB.kernel(wc.kernel).params),
        tune_from=lambda wc: list(LAB.kernel(wc.kernel).tune_from),
    resources:
        gpu=gpu_slots,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/build.py"
