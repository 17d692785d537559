"""Probe: the tensor maps of every configured TMA stage encoded through cuda-bindings (the lab's Encoder)
and through a direct ctypes call of libcuda's cuTensorMapEncodeTiled with the driver's enum values as
numbers (how the lab encoded them before), on a few shapes; prints one line per map and exits 1 if any
two encodings differ. Needs a GPU with compute capability 9.0 and the pipeline's environment.
    PYTHONPATH=src python tools/probes/tensormap_same_bytes.py
"""

import ctypes
import sys

from sgemm_lab import config as cfgmod
from sgemm_lab.config import Shape
from sgemm_lab.gpu.device import driver
from sgemm_lab.tensormap import MAP_BYTES, Encoder, requests

FLOAT32, L2_256B, SWIZZLE = 7, 3, {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMap* values of cuda.h


def by_ctypes(req, address: int) -> bytes:
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuTensorMapEncodeTiled
    u32, u64, p = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
    f.argtypes = [p, ctypes.c_int, u32, p, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                  ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    out = (ctypes.c_uint8 * MAP_BYTES)()
    rc = f(ctypes.addressof(out), FLOAT32, 2, ctypes.c_void_p(address), (u64 * 2)(*req.dims),
           (u64 * 1)(req.row_bytes), (u32 * 2)(*req.box), (u32 * 2)(1, 1), 0, SWIZZLE[req.swizzle], L2_256B, 0)
    if rc:
        raise RuntimeError(f"CUresult {rc}")
    return bytes(out)


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
                a, b = enc(req, int(buf)), by_ctypes(req, int(buf))
                n += 1
                differ += a != b
                print(f"{spec.id} {req.symbol} {shape}: {'same' if a == b else 'DIFFERENT'} ({len(a)} bytes)")
    print(f"{n} maps, {differ} different")
    return 1 if differ or not n else 0


if __name__ == "__main__":
    sys.exit(main())
