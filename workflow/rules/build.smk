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


for _batch, _ids in step_batches("build").items():
    _members = batch_members("build", _ids, build_inputs, build_outputs, build_params)

    rule:
        """Compile each stage of the batch for the machine at hand (PyCUDA for kernels, the C compiler
        for host stages); record registers, shared and local memory. An autotuned stage first picks its
        configuration. One job per class of stage (sgemm_lab.pipeline.batches); a stage whose inputs did
        not change keeps its build (sgemm_lab.pipeline.reuse)."""
        name:
            f"build_{_batch}"
        input:
            batch_inputs(_ids, build_inputs),
        output:
            batch_outputs(_members),
        log:
            batch_logs("build", _batch, _members),
        params:
            members=_members,
        resources:
            gpu=batch_gpu("build", _ids),
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/build.py"
