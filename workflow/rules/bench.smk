rule bench:
    """Size sweep of one implementation: verify, then time every configured shape; a GPU implementation
    is also profiled by Nsight Compute at the profile shapes (tidy CSV; the .ncu-rep is kept next to it
    for the Nsight Compute GUI; unavailable counters become a status). ncu starts before the timing and
    waits for the GPU, so its start-up costs no GPU time."""
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
