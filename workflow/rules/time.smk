rule time:
    """Target: the stages of time.stages at the shapes of time.shapes, each beside its cuBLAS, and nothing
    else of the pipeline (sgemm_lab.pipeline.timeshape), e.g.
    snakemake --cores 1 time --config 'time={"stages": ["<stage id>"], "shapes": ["1000x2000x3000"]}'"""
    input:
        env=ENV_JSON,
        builds=time_build_files(),
    output:
        csv=f"{RESULTS}/time/time.csv",
        md=f"{RESULTS}/time/time.md",
    log:
        f"{RESULTS}/logs/time/time.log",
    params:
        builds=time_builds(),
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/time.py"


rule time_build:
    """The target time's build of one stage, in a job of its own and from its source alone: a dispatch
    stage with a rule compiles every candidate (the rule chooses per shape), no sweep is run."""
    input:
        unpack(time_build_inputs),
    output:
        binary=f"{RESULTS}/time/build/{{kernel}}.bin",
        record=f"{RESULTS}/time/build/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/time/build_{{kernel}}.log",
    resources:
        gpu=lambda wildcards: 0 if LAB.on_host(wildcards.kernel) else 1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/build.py"
