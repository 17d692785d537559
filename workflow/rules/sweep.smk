for _batch, _ids in step_batches("sweep").items():
    _members = batch_members("sweep", _ids, sweep_inputs, lambda impl: [["", f"{REPORTS}/sweeps/{impl}.csv"]],
                             sweep_params)

    rule:
        """Tile sweep of each parameterised stage: constraint filter, parallel compiles, verify, time.
        A stage whose source and grids did not change keeps its sweep (sgemm_lab.pipeline.reuse)."""
        name:
            f"sweep_{_batch}"
        input:
            batch_inputs(_ids, sweep_inputs),
        output:
            batch_outputs(_members),
        log:
            batch_logs("sweep", _batch, _members),
        params:
            members=_members,
        priority: 10  # the autotuned stage (and everything after it) waits for the sweeps
        resources:
            gpu=1,
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/sweep.py"
