for _batch, _ids in step_batches("check").items():
    _members = batch_members("check", _ids, impl_inputs, lambda impl: [["", f"{RESULTS}/check/{impl}.json"]])

    rule:
        """Verify each implementation of the batch against a float64 reference on the configured check
        shapes (the sanitizers run in their own job, workflow/rules/sanitize.smk). A stage whose build
        and inputs did not change keeps its check (sgemm_lab.pipeline.reuse)."""
        name:
            f"check_{_batch}"
        input:
            batch_inputs(_ids, impl_inputs),
        output:
            batch_outputs(_members),
        log:
            batch_logs("check", _batch, _members),
        params:
            members=_members,
        resources:
            gpu=batch_gpu("check", _ids),
        conda:
            "../../env/conda.yaml"
        script:
            "../scripts/check.py"
