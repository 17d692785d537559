rule bench:
    """Size sweep of one implementation: verify, then time every configured shape."""
    input:
        unpack(impl_inputs),
    output:
        f"{RESULTS}/bench/{{kernel}}.csv",
        status=f"{RESULTS}/status/bench/{{kernel}}.json",
    log:
        f"{RESULTS}/logs/bench/{{kernel}}.log",
    threads: host_timing_threads
    resources:
        gpu=gpu_slots,
    conda:
        "../../env/conda.yaml"
    script:
        "../scripts/bench.py"
