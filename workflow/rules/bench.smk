for _batch, _ids in step_batches("bench").items():
    _members = batch_members("bench", _ids, impl_inputs, lambda impl: [["", f"{RESULTS}/bench/{impl}.csv"]])

    rule:
        """Size sweep of each implementation of the batch: verify, then time every configured shape
        (tidy CSV). Host stages and the NumPy baseline form their own batch, timed with every core to
        themselves. A stage whose build and inputs did not change keeps its timings
        (sgemm_lab.pipeline.reuse)."""
        name:
            f"bench_{_batch}"
        input:
            batch_inputs(_ids, impl_inputs),
        output:
            batch_outputs(_members),
        log:
            batch_logs("bench", _batch, _members),
        params:
            members=_members,
        threads: all_cores() if not batch_gpu("bench", _ids) else 1
        resources:
            gpu=batch_gpu("bench", _ids),
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/bench.py"
