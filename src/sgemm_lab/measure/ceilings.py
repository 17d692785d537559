"""The machine's measured ceilings: FP32 FMA throughput, TF32 and INT8 tensor-core throughput (Hopper's
wgmma) and DRAM copy bandwidth (the roofline's roofs, and the INT8 products' of integer emulation), timed
like any point."""

from __future__ import annotations

import numpy as np

from ..gpu.device import device_info, driver
from ..gpu.timing import time_launches

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


# wgmma's TF32 product from registers (A, 64 x 8) and shared memory (B, 8 x 256 through a descriptor)
# into 128 FP32 registers a thread: the widest form, the one stage 17 runs.
_D = ", ".join(f"%{i}" for i in range(128))
_OUT = ", ".join(f'"+f"(d[{i}])' for i in range(128))
_TF32_PROBE = r"""
// Tensor-core throughput: each of the block's two warpgroups streams wgmma m64n256k8 (TF32 in, FP32
// accumulate) on operands that stay put (A in registers, B in shared memory, zeros: the values do not
// change the rate), GROUP of them per commit, one group left in flight while the next is issued, as a
// GEMM's main loop would with its loads taken away.
__device__ __forceinline__ void mma(float (&d)[128], const unsigned (&a)[4], unsigned long long desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {""" + _D + r"""}, "
                 "{%128, %129, %130, %131}, %132, 1, 1, 1;\n"
                 : """ + _OUT + r"""
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

extern "C" __global__ void __launch_bounds__(256, 1) lab_tf32_probe(float* out, int iters) {
    // B: 256 lines of 32 floats (128 bytes), 128-byte swizzled, 1024 bytes between 8-line groups
    __shared__ __align__(1024) float b[256 * 32];
    for (int i = threadIdx.x; i < 256 * 32; i += blockDim.x) b[i] = 0.0f;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma's proxy
    __syncthreads();
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(b));
    const unsigned long long desc = (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16)
                                    | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
    const unsigned a[4] = {0u, 0u, 0u, 0u};
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.0f;
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int g = 0; g < GROUP; ++g) mma(d, a, desc);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
    if (s == 1.2345f) out[0] = s;  // never (all zeros); keeps the products alive
}
"""
TF32_ARCH = "sm_90a"  # wgmma exists on compute capability 9.0 only, built for its arch-specific target

# The same loop with wgmma's INT8 product (m64n256k32, s8 x s8 into 128 INT32 registers a thread): the
# roof of integer emulation's products (the Ozaki scheme II; kernels/notes/history/18-ozaki2-predictions.md).
# Integer wgmma takes no scale or transpose arguments; A's 64 x 32 bytes are 4 registers a thread as for TF32.
def _int8_from_tf32(text: str) -> str:
    """The TF32 probe with each of its TF32 parts replaced, each found exactly as often as expected (an
    edit of the TF32 probe that one of them no longer matches stops here, not in a wrong probe)."""
    swaps = [("m64n256k8 (TF32 in, FP32", "m64n256k32 (INT8 in, INT32", 1),
             ("lines of 32 floats (128 bytes)", "lines of 128 INT8 elements (128 bytes)", 1),
             ("float (&d)[128]", "int (&d)[128]", 1), ("m64n256k8.f32.tf32.tf32", "m64n256k32.s32.s8.s8", 1),
             ("%132, 1, 1, 1;", "%132, 1;", 1), ('"+f"(d[', '"+r"(d[', 128), ("lab_tf32_probe", "lab_int8_probe", 1),
             ("float d[128];", "int d[128];", 1), ("d[i] = 0.0f;", "d[i] = 0;", 1), ("float s = 0.0f;", "int s = 0;", 1),
             ("if (s == 1.2345f) out[0] = s;", "if (s == 12345) out[0] = s;", 1)]
    for old, new, times in swaps:
        if text.count(old) != times:
            raise AssertionError(f"the TF32 probe has {text.count(old)} of {old!r}, not {times}")
        text = text.replace(old, new)
    return text


_INT8_PROBE = _int8_from_tf32(_TF32_PROBE)


def compile_probes(arch: str, *, int8: bool = True) -> dict[str, bytes]:
    """The probes' binaries for ``arch`` (nvcc only, no GPU: compiled before the step takes the GPU); on
    Hopper the TF32 tensor-core probe and, with ``int8``, the INT8 one."""
    from ..gpu.build import nvcc

    out = {"fma": nvcc("ceilings (FMA probe)", _FMA_PROBE, ["-O3", f"-DCHAINS={FMA_CHAINS}"], arch)}
    if arch == "sm_90":
        out["tf32"] = nvcc("ceilings (TF32 probe)", _TF32_PROBE, ["-O3", f"-DGROUP={TF32_GROUP}"], TF32_ARCH)
        if int8:
            out["int8"] = nvcc("ceilings (INT8 probe)", _INT8_PROBE, ["-O3", f"-DGROUP={TF32_GROUP}"], TF32_ARCH)
    return out


FMA_CHAINS, TF32_GROUP = 8, 4


def measure_ceilings(cubins: dict[str, bytes], *, warmup_ms: float = 300, reps: int = 20) -> dict:
    """Measured FP32 FMA throughput, device-to-device copy bandwidth and, on Hopper (compute capability
    9.0), TF32 tensor-core throughput through wgmma, of the GPU at hand (``cubins``: ``compile_probes``).
    Each is watched for other work on the GPU like a bench point (``measure.foreign``): tried again while
    there is some, and its record says what was seen (``disturbance``) and whether every try was
    disturbed (``disturbed``). Call it holding the GPU lock exclusively."""
    from .foreign import Watch, note_before_cuda_once, undisturbed

    note_before_cuda_once()  # (which processes held the GPU before this one started CUDA)
    cuda = driver()
    dev = device_info()
    stream = cuda.Stream()

    def timed(launch):
        t, seen, disturbed = undisturbed(lambda: time_launches(
            launch, stream, warmup_ms=warmup_ms, target_ms=200, min_reps=reps, max_reps=200, flush=None,
            pci_bus_id=dev.pci_bus_id), Watch.on(dev.pci_bus_id))
        return t, dict(**t.as_row(), disturbance=seen, disturbed=disturbed)

    chains, iters, threads = FMA_CHAINS, 4096, 256
    blocks = dev.multiprocessors * 8
    fn = cuda.module_from_buffer(cubins["fma"]).get_function("lab_fma_probe")
    fn.prepare("PffI")
    scratch = cuda.mem_alloc(4)
    fma, fma_row = timed(lambda: fn.prepared_async_call((blocks, 1), (threads, 1, 1), stream, scratch,
                                                         np.float32(0.9999), np.float32(0.0001), iters))
    flops = 2.0 * blocks * threads * iters * chains
    nbytes = 1 << 30
    src, dst = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
    cuda.memset_d32(src, 0x3F800000, nbytes // 4)
    copy, copy_row = timed(lambda: cuda.memcpy_dtod_async(dst, src, nbytes, stream))
    for buf in (src, dst):
        buf.free()
    rec = {
        "fp32_tflops": flops / (fma.stats.median_ms * 1e-3) / 1e12,
        "fp32_probe": dict(blocks=blocks, threads=threads, chains=chains, iters=iters, **fma_row),
        "dram_gbps": 2 * nbytes / (copy.stats.median_ms * 1e-3) / 1e9,
        "dram_probe": dict(bytes_copied=nbytes, counted="read + write", **copy_row),
    }
    if dev.compute_capability == "9.0" and "tf32" in cubins:
        group, iters = TF32_GROUP, 2048
        tc = cuda.module_from_buffer(cubins["tf32"]).get_function("lab_tf32_probe")
        tc.prepare("Pi")
        blocks = dev.multiprocessors
        t, row = timed(lambda: tc.prepared_async_call((blocks, 1), (256, 1, 1), stream, scratch, iters))
        products = blocks * 2 * iters * group  # two warpgroups a block, each a 64 x 256 x 8 product per wgmma
        rec["tf32_tflops"] = 2.0 * 64 * 256 * 8 * products / (t.stats.median_ms * 1e-3) / 1e12
        rec["tf32_probe"] = dict(blocks=blocks, threads=256, instruction="wgmma m64n256k8 tf32", group=group,
                                 iters=iters, **row)
        if "int8" in cubins:
            i8 = cuda.module_from_buffer(cubins["int8"]).get_function("lab_int8_probe")
            i8.prepare("Pi")
            t, row = timed(lambda: i8.prepared_async_call((blocks, 1), (256, 1, 1), stream, scratch, iters))
            rec["int8_tops"] = 2.0 * 64 * 256 * 32 * products / (t.stats.median_ms * 1e-3) / 1e12
            rec["int8_probe"] = dict(blocks=blocks, threads=256, instruction="wgmma m64n256k32 s8", group=group,
                                     iters=iters, **row)
    else:
        rec["tf32_probe"] = dict(skipped=f"wgmma needs compute capability 9.0; this GPU is {dev.compute_capability}")
    scratch.free()
    return rec
