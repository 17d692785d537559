rule precompile:
    """Compile, side by side, every stage the builds will compile (epilogue variants, dispatch candidates
    and tile-sweep points too) into results/<run>/build/precompiled/, each binary named by what the
    compiler saw: the builds, sweeps, shape sweeps and epilogue steps read theirs from there instead of
    compiling one at a time. No step waits for it through an input: a job that reruns hides, from
    Snakemake's check, every job that waits for it through an ancient() input (snakemake/snakemake#4166),
    which once left an edited kernel's build unrun. Its priority puts it first under --cores 1; run
    beside them, a step waits for a binary this step is compiling and compiles none twice (each binary's
    lock, sgemm_lab.gpu.build.compile_many). It runs once a run, on a fresh one."""
    priority: 20
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
