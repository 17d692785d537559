"""Measuring: verify and time one implementation, one GPU user at a time, each point supervised.

- ``runners``: the callers of every backend (a CUDA kernel, cuBLAS, a host stage, NumPy): check and bench
- ``isolate``: the points of a job in a child process with a watchdog (a crash or a hang is one row)
- ``gpulock``: the GPU locks (host-wide, one per GPU UUID; exclusive for timing, shared for checks) and
  the pinning of a process to its GPU
- ``foreign``: other work on a timed point's GPU, the retries, ``disturbed``
- ``processes``: what NVML says about the processes on a GPU, and which are the pipeline's own
- ``ceilings``: measured FMA throughput, DRAM bandwidth and the tensor pipes' rates, watched like a point
(float64 references and tolerances, ``results.verify``, and timing statistics, ``results.stats``, are one
layer down, where the GPU layer reads them too)
"""
