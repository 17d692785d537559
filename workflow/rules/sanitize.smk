if all_sanitize():

    rule sanitize:
        """compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on every CUDA stage at a small
        shape it supports, in one job: the tools of all stages run side by side, one process per core
        (they check correctness, not speed). One table per stage; a stage whose build failed gets an
        empty one."""
        input:
            unpack(sanitize_inputs),
        output:
            tables=all_sanitize(),
            status=f"{RESULTS}/status/sanitize.json",
        log:
            f"{RESULTS}/logs/sanitize.log",
        # Its tool processes use every core the machine gives it, whatever it claims here: it holds the GPU
        # lock shared, so nothing is timed meanwhile. Claiming two cores, not all, lets Snakemake start it
        # beside the checks (which share the lock too) instead of after every other job.
        threads: 2
        priority: 5
        params:
            builds=sanitize_builds(),
            log_dir=f"{RESULTS}/sanitize/logs",
        resources:
            gpu=1,
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/sanitize.py"
