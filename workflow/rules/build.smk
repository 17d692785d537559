rule precompile:
    """Compile, side by side, every stage the builds will compile (epilogue variants, dispatch candidates
    and tile-sweep points too) and keep the binaries under results/<run>/build/precompiled/, named by what
    the compiler saw: the builds, sweeps, shape sweeps and epilogue steps read theirs from there instead
    of compiling one at a time. It runs once a run, on a fresh one; the steps after it take its record as
    ancient() input, to wait for it. Its inputs are the environment record alone, on purpose: a job that
    reruns hides, from Snakemake's check, every job after it that waits for it through an ancient() input
    (snakemake/snakemake#4166), so a precompile that reran for an edited kernel left that kernel's build
    unrun. An edited kernel is compiled by its own build (or sweep) instead, which reruns for it."""
    input:
        env=ENV_JSON,
    output:
        PRECOMPILED,
        status=f"{RESULTS}/status/precompile.json",
    log:
        f"{RESULTS}/logs/build/precompile.log",
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
