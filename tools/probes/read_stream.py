"""What DRAM gives a stream that only reads, beside the copy the ceilings step times: the yardstick for
stage 19 (a narrow output streams A once; kernels/NOTES.md, "Stage 19: what a read-only stream gets").

Kernels over the same 1 GiB of device memory, each timed as the lab times a point (`sgemm_lab.gpu.timing`:
CUDA events, warm-up by time, the median of at least 20 launches, the L2 flushed before each):
- copy: cuMemcpyDtoD of half of it into the other half (read + write counted, as the ceilings step does);
- read4: every thread sums float4 loads in a grid-stride loop (the fastest way to read);
- rows: stage 19's pattern without its FMAs: rows of K = 6144 floats, 32 rows a block of 8 warps, a warp
  reading 4 rows in 128-float steps with 4-byte loads (lane l, column 32 j + l), as many blocks an SM as
  fit; rows2 the same held to stage 19's two blocks an SM (by a dynamic shared-memory request it does not
  use), to tell the pattern from the occupancy; rows2_sync the same with a block barrier after every
  K-step, and rows2_fma with 12 FMAs a loaded value (stage 19's work at N = 12, on constants) as well.

Options: `--mib` sets the buffer's size (stage 19's suite shape streams 192 MiB of A, in one wave of
blocks); `--flush read|write|both` times every kernel after the lab's L2 flush (`read`: a buffer twice the
L2's size read through it) or after the form it replaced (`write`: the buffer overwritten, leaving L2
full of dirty lines that DRAM writes back during the timed launch), or both, side by side.

    python tools/probes/read_stream.py [--json out.json] [--mib 1024] [--flush read]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

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
    ap.add_argument("--mib", type=int, default=1024, help="buffer size in MiB")
    ap.add_argument("--flush", choices=("read", "write", "both"), default="read")
    args = ap.parse_args()

    import numpy as np
    from pycuda.compiler import SourceModule

    from sgemm_lab.gpu.device import device_info, driver
    from sgemm_lab.gpu.timing import L2Flusher, time_launches

    cuda = driver()
    dev = device_info()
    stream = cuda.Stream()
    mod = SourceModule(SRC, options=["-O3"], no_extern_c=True)
    read4 = mod.get_function("read4")
    rows = {name: mod.get_function(name) for name in ("rows", "rows_sync", "rows_fma")}
    for f in rows.values():
        f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, dev.max_shared_per_block_optin)
    two_a_sm = dev.max_shared_per_block_optin // 2 - 1024  # two blocks fit an SM's shared memory, three do not
    nbytes = args.mib << 20
    buf = cuda.mem_alloc(nbytes)
    cuda.memcpy_htod(buf, np.random.default_rng(0).random(nbytes // 4, dtype=np.float32))
    out = cuda.mem_alloc(4)
    K = 6144
    n_rows = (nbytes // 4 // K) // 32 * 32
    row_bytes = n_rows * K * 4

    def rows_launch(name: str, shared: int):
        return lambda: rows[name](buf, np.int32(K), out, block=(256, 1, 1), grid=(n_rows // 32, 1), shared=shared,
                                  stream=stream)

    cases = (
        ("copy", lambda: cuda.memcpy_dtod_async(int(buf) + nbytes // 2, buf, nbytes // 2, stream), nbytes),
        ("read4", lambda: read4(buf, np.int64(nbytes // 16), out, block=(256, 1, 1), grid=(dev.multiprocessors * 8, 1),
                                stream=stream), nbytes),
        ("rows", rows_launch("rows", 0), row_bytes),
        ("rows2", rows_launch("rows", two_a_sm), row_bytes),
        ("rows2_sync", rows_launch("rows_sync", two_a_sm), row_bytes),
        ("rows2_fma", rows_launch("rows_fma", two_a_sm), row_bytes),
    )
    modes = ("read", "write") if args.flush == "both" else (args.flush,)
    flushers = {mode: L2Flusher(dev.l2_bytes, mode) for mode in modes}
    results = {}
    for name, run, counted in cases:
        for mode in modes:
            t = time_launches(run, stream, warmup_ms=300, target_ms=100, min_reps=args.reps, max_reps=200,
                              flush=flushers[mode], pci_bus_id=dev.pci_bus_id)
            key = name if len(modes) == 1 else f"{name}@{mode}"
            results[key] = dict(median_ms=t.stats.median_ms, bytes=counted, gbps=counted / (t.stats.median_ms * 1e-3) / 1e9,
                                flush=mode)
    results["device"] = dev.name
    results["mib"] = args.mib
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"{'kernel':18s} {'ms':>8s} {'GB/s':>8s}")
    for key, r in results.items():
        if isinstance(r, dict):
            print(f"{key:18s} {r['median_ms']:8.3f} {r['gbps']:8.1f}")


if __name__ == "__main__":
    main()
