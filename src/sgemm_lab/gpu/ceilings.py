"""The machine's measured ceilings: FP32 FMA throughput and DRAM copy bandwidth (the roofline's
roof), timed like any point."""

from __future__ import annotations

import numpy as np

from .device import device_info, driver
from .timing import time_launches

_FMA_PROBE = r"""
// Each thread runs CHAINS independent FMA chains (enough to hide the FMA latency), ITERS deep.
extern "C" __global__ void lab_fma_probe(float* out, float a, float b, int iters) {
    float x[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) x[c] = threadIdx.x + c;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) x[c] = fmaf(x[c], a, b);
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += x[c];
    if (s == 1.2345f) out[0] = s;  // practically never; keeps the chains alive
}
"""


def measure_ceilings(*, warmup_ms: float = 300, reps: int = 20) -> dict:
    """Measured FP32 FMA throughput and device-to-device copy bandwidth of the GPU at hand."""
    cuda = driver()
    from pycuda.compiler import SourceModule

    dev = device_info()
    stream = cuda.Stream()
    chains, iters, threads = 8, 4096, 256
    blocks = dev.multiprocessors * 8
    fn = SourceModule(_FMA_PROBE, options=["-O3", f"-DCHAINS={chains}"], no_extern_c=True).get_function("lab_fma_probe")
    fn.prepare("PffI")
    scratch = cuda.mem_alloc(4)
    fma = time_launches(lambda: fn.prepared_async_call((blocks, 1), (threads, 1, 1), stream, scratch,
                                                       np.float32(0.9999), np.float32(0.0001), iters),
                        stream, warmup_ms=warmup_ms, target_ms=200, min_reps=reps, max_reps=200, flush=None,
                        pci_bus_id=dev.pci_bus_id)
    flops = 2.0 * blocks * threads * iters * chains
    nbytes = 1 << 30
    src, dst = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
    cuda.memset_d32(src, 0x3F800000, nbytes // 4)
    copy = time_launches(lambda: cuda.memcpy_dtod_async(dst, src, nbytes, stream), stream, warmup_ms=warmup_ms,
                         target_ms=200, min_reps=reps, max_reps=200, flush=None, pci_bus_id=dev.pci_bus_id)
    for buf in (src, dst, scratch):
        buf.free()
    return {
        "fp32_tflops": flops / (fma.stats.median_ms * 1e-3) / 1e12,
        "fp32_probe": dict(blocks=blocks, threads=threads, chains=chains, iters=iters, **fma.as_row()),
        "dram_gbps": 2 * nbytes / (copy.stats.median_ms * 1e-3) / 1e9,
        "dram_probe": dict(bytes_copied=nbytes, counted="read + write", **copy.as_row()),
    }
