rule epilogue:
    """Fused bias + activation epilogue of one stage vs cuBLASLt epilogues and cuBLAS + a separate kernel."""
    input:
        env=ENV_JSON,
        source=lambda wc: str(LAB.kernel(wc.kernel).source_path),
        headers=kernel_headers(),
    output:
        f"{REPORTS}/epilogue/{{kernel}}.csv",
        status=f"{RESULTS}/status/epilogue/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/epilogue/{{kernel}}.log",
    resources:
        gpu=1,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/epilogue.py"
