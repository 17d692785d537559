"""Diagnostic: can the tensor memory accelerator read a row from a float that is not on a 16-byte boundary?

The TMA stages (17, 18, 20) copy A and B into re-pitched buffers when K or N is not a multiple of 4
(``gpu/padding.py``), because a tensor map's row pitch must be a multiple of 16 bytes. A row r of A then
starts (r * K) % 4 floats past a 16-byte boundary. Grouped by that offset (rows r = j, j + 4, j + 8, ...
for K odd), the rows of a group are 4 K floats apart, a pitch the accelerator takes, from a base that is
aligned once moved back by the offset: a map per group, read at inner coordinate ``offset + k``. That
works only if a box may start at an inner coordinate that is not a multiple of 4 floats. This script
reads boxes at inner coordinates on 16-byte boundaries (checked against NumPy, unswizzled and with the
128-byte swizzle the stages use), then one box off them, last, since a fault ends the context.

    python tools/probes/tma_offset.py [X]      (on a GPU; X: the last box's inner coordinate, default 1;
                                                exits 1 if an aligned box differs from NumPy)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

SRC = r"""
struct __align__(64) TensorMap { unsigned long long opaque[16]; };
__device__ TensorMap tmap;

__device__ __forceinline__ void load_box(unsigned dst, int x, int y, unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&tmap)), "r"(x), "r"(y), "r"(bar) : "memory");
}
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nw_%=:\nmbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra w_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// One box of ROWS x 32 floats at (x, y), copied out as the accelerator laid it in shared memory.
extern "C" __global__ void one_box(float* out, int x, int y) {
    __shared__ __align__(1024) float tile[ROWS * 32];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned b = (unsigned)__cvta_generic_to_shared(&bar), t = (unsigned)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(b));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        load_box(t, x, y, b, ROWS * 32 * 4);
        wait(b, 0);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ROWS * 32; i += blockDim.x)
        out[i] = tile[i];
}

"""

ROWS = 8


def unswizzle(tile: np.ndarray, swizzle: int) -> np.ndarray:
    """The box as rows x 32 floats from the accelerator's layout: with the 128-byte swizzle, the 16-byte
    chunk c of line r is stored at chunk c ^ (r % 8)."""
    if not swizzle:
        return tile
    out = np.empty_like(tile)
    for r in range(tile.shape[0]):
        for c in range(8):
            out[r, 4 * c:4 * c + 4] = tile[r, 4 * (c ^ (r % 8)):4 * (c ^ (r % 8)) + 4]
    return out


def main() -> int:
    import pycuda.driver as cuda
    from pycuda import autoinit
    from pycuda.compiler import SourceModule

    from sgemm_lab.gpu.tensormap import Encoder, MapRequest

    mod = SourceModule(SRC, options=["-O3", f"-DROWS={ROWS}"], arch="sm_90a", no_extern_c=True)
    one_box = mod.get_function("one_box")
    var, _ = mod.get_global("tmap")
    encode = Encoder()
    print(f"device: {autoinit.device.name()}")

    rows, pitch = 64, 4 * 40  # a matrix of 64 rows, 160 floats apart (640 bytes: a multiple of 16)
    host = np.arange(rows * pitch, dtype=np.float32).reshape(rows, pitch)
    dev = cuda.to_device(host)
    out = cuda.mem_alloc(ROWS * 32 * 4)
    bad = 0
    print("box of 8 x 32 floats at (x, y) against NumPy (zeros past the extent)")

    def box(x: int, y: int, swizzle: int, width: int) -> bool:
        req = MapRequest(symbol="tmap", operand="A", dims=(width, rows), row_bytes=4 * pitch, box=(32, ROWS),
                         swizzle=swizzle)
        cuda.memcpy_htod(var, encode(req, int(dev)))
        one_box(out, np.int32(x), np.int32(y), block=(128, 1, 1), grid=(1, 1))
        got = unswizzle(cuda.from_device(out, (ROWS, 32), np.float32), swizzle)
        want = np.zeros((ROWS, 32), np.float32)
        r1, c1 = min(rows, y + ROWS), min(width, x + 32)
        want[: r1 - y, : c1 - x] = host[y:r1, x:c1]
        return bool(np.array_equal(got, want))

    for swizzle in (0, 128):
        for width in (150, 157):  # the map's inner extent
            for x, y in ((0, 0), (4, 3), (32, 9), (36, 17), (124, 56), (148, 60)):
                ok = box(x, y, swizzle, width)
                bad += not ok
                print(f"  swizzle {swizzle:3d}  extent {width}  x {x:3d}  y {y:2d}: {'equal' if ok else 'DIFFERENT'}")
    x = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    try:
        ok = box(x, 0, 0, 157)
        print(f"  swizzle   0  extent 157  x {x:3d} (x % 4 = {x % 4}): {'equal' if ok else 'DIFFERENT'}")
    except cuda.Error as exc:
        print(f"  swizzle   0  extent 157  x {x:3d} (x % 4 = {x % 4}): the launch faulted: {exc}")
    print(f"{bad} mismatches at inner coordinates on 16-byte boundaries")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
