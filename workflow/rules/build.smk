rule precompile:
    """Compile, side by side, every stage the builds will compile (epilogue variants and dispatch
    candidates too) and keep the binaries under results/<run>/build/precompiled/: the builds that
    follow, one at a time under --cores 1, read theirs from there, as do the epilogue and shape-sweep
    steps (their variants and candidates), with no compile worker started. They take its output as ancient() input: they wait for it, but a kernel edited later
    reruns its own stage's steps only."""
    input:
        env=ENV_JSON,
        sources=kernel_sources(),
    output:
        PRECOMPILED,
        status=f"{RESULTS}/status/precompile.json",
    log:
        f"{RESULTS}/logs/build/precompile.log",
    params:
        options=precompile_options,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/precompile.py"


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
