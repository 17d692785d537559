"""Probe: the tensor maps of every configured TMA stage encoded by the lab's Encoder (libcuda's
cuTensorMapEncodeTiled through ctypes, enum values as numbers) and through cuda-bindings (the driver's
typed Python bindings), on a few shapes; prints one line per map and exits 1 if any two encodings
differ. Needs a GPU with compute capability 9.0 and the pipeline's environment.
    PYTHONPATH=src python tools/probes/tensormap_same_bytes.py
Run under compute-sanitizer --tool memcheck it also shows why the lab keeps ctypes: cuda-bindings' first
call probes the driver with cuGetProcAddress for symbols it lacks, each an API error to memcheck.
"""

import ctypes
import sys

from sgemm_lab.config import load as cfgmod
from sgemm_lab.config.records import Shape
from sgemm_lab.gpu.device import driver
from sgemm_lab.gpu.tensormap import MAP_BYTES, Encoder, requests

SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}


def by_bindings(req, address: int) -> bytes:
    from cuda.bindings import driver as cu

    u32, u64 = cu.cuuint32_t, cu.cuuint64_t
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, address, [u64(d) for d in req.dims],
        [u64(req.row_bytes)], [u32(b) for b in req.box], [u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{SWIZZLE[req.swizzle]}"),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(err.name)
    return ctypes.string_at(tmap.getPtr(), MAP_BYTES)


def main() -> int:
    cuda = driver()
    lab = cfgmod.load("config/config.yaml")
    buf = cuda.mem_alloc(64 << 20)
    enc, differ, n = Encoder(), 0, 0
    for spec in lab.kernels:
        if not spec.tensor_maps:
            continue
        for shape in (Shape(m=4096, n=4096, k=4096), Shape(m=128, n=96, k=49152), Shape(m=1000, n=3332, k=1504)):
            for req in requests(spec, shape):
                a, b = enc(req, int(buf)), by_bindings(req, int(buf))
                n += 1
                differ += a != b
                print(f"{spec.id} {req.symbol} {shape}: {'same' if a == b else 'DIFFERENT'} ({len(a)} bytes)")
    print(f"{n} maps, {differ} different")
    return 1 if differ or not n else 0


if __name__ == "__main__":
    sys.exit(main())
