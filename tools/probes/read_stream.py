"""What DRAM gives a stream that only reads, beside the copy the ceilings step times: the yardstick for
stage 19 (a narrow output streams A once; kernels/NOTES.md, "Stage 19: what a read-only stream gets").

Three kernels over the same 1 GiB of device memory, each timed with CUDA events (warm-up by time, then
the median of 20 launches, the L2 flushed before each by a write of twice its size):
- copy: cuMemcpyDtoD of half of it into the other half (read + write counted, as the ceilings step does);
- read4: every thread sums float4 loads in a grid-stride loop (the fastest way to read);
- rows: stage 19's pattern without its FMAs: rows of K = 6144 floats, 32 rows a block of 8 warps, a warp
  reading 4 rows in 128-float steps with 4-byte loads (lane l, column 32 j + l), as many blocks an SM as
  fit; rows2 the same held to stage 19's two blocks an SM (by a dynamic shared-memory request it does not
  use), to tell the pattern from the occupancy; rows2_sync the same with a block barrier after every
  K-step, and rows2_fma with 12 FMAs a loaded value (stage 19's work at N = 12, on constants) as well.

    python tools/probes/read_stream.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

SRC = r"""
extern "C" __global__ void read4(const float4* __restrict__ a, long long n4, float* out) {
    float s = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 v = __ldg(a + i);
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 1.2345f) out[0] = s;  // never true for these inputs: keeps the loads
}

// 32 rows a block, 8 warps of 4 rows; each K-step of 128 floats a lane loads columns 32 j + lane.
// SYNC: a block barrier after every K-step; FMA: 12 FMAs a value into 12 sums (stage 19 at N = 12).
template <bool SYNC, bool FMA>
__device__ __forceinline__ void rowsBody(const float* __restrict__ a, int K, float* out) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const float* r0 = a + ((long long)blockIdx.x * 32 + warp * 4) * K + lane;
    float s[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int k0 = 0; k0 < K; k0 += 128) {
        float v[4][4];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                v[r][j] = __ldg(r0 + (long long)r * K + k0 + 32 * j);
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (FMA) {
#pragma unroll
                    for (int n = 0; n < 12; ++n)
                        s[n] = fmaf(v[r][j], 1.0f + n * 0.125f, s[n]);
                } else {
                    s[0] += v[r][j];
                }
            }
        if (SYNC)
            __syncthreads();
    }
    float t = 0.0f;
#pragma unroll
    for (int n = 0; n < 12; ++n)
        t += s[n];
    if (t == 1.2345f) out[0] = t;  // never true for these inputs: keeps the loads
}
extern "C" __global__ void __launch_bounds__(256, 2) rows(const float* __restrict__ a, int K, float* out) {
    rowsBody<false, false>(a, K, out);
}
extern "C" __global__ void __launch_bounds__(256, 2) rows_sync(const float* __restrict__ a, int K, float* out) {
    rowsBody<true, false>(a, K, out);
}
extern "C" __global__ void __launch_bounds__(256, 2) rows_fma(const float* __restrict__ a, int K, float* out) {
    rowsBody<true, true>(a, K, out);
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import numpy as np
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    mod = SourceModule(SRC, options=["-O3"], no_extern_c=True)
    read4, rows = mod.get_function("read4"), mod.get_function("rows")
    rows_sync, rows_fma = mod.get_function("rows_sync"), mod.get_function("rows_fma")
    dev = cuda.Context.get_device()
    sms = dev.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT)
    l2 = dev.get_attribute(cuda.device_attribute.L2_CACHE_SIZE)
    nbytes = 1 << 30
    buf = cuda.mem_alloc(nbytes)
    cuda.memcpy_htod(buf, np.random.default_rng(0).random(nbytes // 4, dtype=np.float32))
    flush = cuda.mem_alloc(2 * l2)
    out = cuda.mem_alloc(4)
    K = 6144
    n_rows = (nbytes // 4 // K) // 32 * 32

    def launch_copy():
        cuda.memcpy_dtod(int(buf) + nbytes // 2, buf, nbytes // 2)

    def launch_read4():
        read4(buf, np.int64(nbytes // 16), out, block=(256, 1, 1), grid=(sms * 8, 1))

    def launch_rows():
        rows(buf, np.int32(K), out, block=(256, 1, 1), grid=(n_rows // 32, 1))

    smem_max = dev.get_attribute(cuda.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    for f in (rows, rows_sync, rows_fma):
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_max)
    two_a_sm = smem_max // 2 - 1024  # two blocks fit an SM's shared memory, three do not

    def two_a_sm_launch(f):
        return lambda: f(buf, np.int32(K), out, block=(256, 1, 1), grid=(n_rows // 32, 1), shared=two_a_sm)

    launch_rows2, launch_rows2_sync, launch_rows2_fma = (two_a_sm_launch(f) for f in (rows, rows_sync, rows_fma))

    def timed(fn) -> float:
        t_end = time.perf_counter() + 0.3
        while time.perf_counter() < t_end:  # the SM clock ramps up from idle
            fn()
            cuda.Context.synchronize()
        times = []
        for _ in range(args.reps):
            cuda.memset_d32(flush, 0, (2 * l2) // 4)
            start, stop = cuda.Event(), cuda.Event()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(stop.time_since(start))
        return float(np.median(times))

    results = {}
    for name, fn, counted in (("copy", launch_copy, nbytes), ("read4", launch_read4, nbytes),
                              ("rows", launch_rows, n_rows * K * 4), ("rows2", launch_rows2, n_rows * K * 4),
                              ("rows2_sync", launch_rows2_sync, n_rows * K * 4), ("rows2_fma", launch_rows2_fma, n_rows * K * 4)):
        ms = timed(fn)
        results[name] = dict(median_ms=ms, bytes=counted, gbps=counted / (ms * 1e-3) / 1e9)
    results["device"] = dev.name()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"{'kernel':8s} {'ms':>8s} {'GB/s':>8s}")
    for name in ("copy", "read4", "rows", "rows2", "rows2_sync", "rows2_fma"):
        r = results[name]
        print(f"{name:8s} {r['median_ms']:8.3f} {r['gbps']:8.1f}")


if __name__ == "__main__":
    main()
